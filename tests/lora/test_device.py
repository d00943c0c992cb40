"""Where fine-tuning and the merge compute: the device the stage resolves from runtime.device,
down to the torch device the model is moved to (the model's ``.to`` stops the stage there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.lora.test_merge import ITEMS, make_adapter
from tests.stage_script import (
    Reached,
    device_env_kept,  # noqa: F401 (autouse)
    load_stage,
    params_file,
    run_stage,
)

from quantbench.config import MergeSettings
from quantbench.errors import UserError

MACHINES = [("fake_gpu", "cuda:0"), ("no_gpu", "cpu")]


class Model:
    """What from_pretrained returns here: moving it is as far as a stage gets."""

    def to(self, *args: object, **kwargs: object) -> None:
        raise Reached(to=args[0] if args else kwargs.get("device"))


@pytest.fixture
def unloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' model loader answering :class:`Model` (no weights read)."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: Model())


@pytest.mark.parametrize(("machine", "moved_to"), MACHINES)
def test_finetune_trains_where_runtime_device_resolves(
    machine, moved_to, request, monkeypatch, tmp_path, tiny_model_dir, unloaded
) -> None:  # type: ignore[no-untyped-def]
    request.getfixturevalue(machine)
    stage = load_stage("finetune", monkeypatch)
    params = params_file(tmp_path, "auto", lora={"train": True})
    with pytest.raises(Reached) as reached:
        run_stage(stage, monkeypatch, params, "--base", str(tiny_model_dir),
                  "--out", str(tmp_path / "adapter"), "--report", str(tmp_path / "r.json"))  # fmt: skip
    assert reached.value.seen == {"to": moved_to}
    assert not (tmp_path / "adapter").exists()


@pytest.mark.parametrize(("machine", "moved_to"), MACHINES)
def test_an_adopted_adapter_is_scored_where_runtime_device_resolves(
    machine, moved_to, request, monkeypatch, tmp_path, tiny_model_dir, unloaded
) -> None:  # type: ignore[no-untyped-def]
    request.getfixturevalue(machine)
    given = tmp_path / "given"
    given.mkdir()
    (given / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    stage = load_stage("finetune", monkeypatch)
    params = params_file(tmp_path, "auto", lora={"train": False, "adapter_path": str(given)})
    with pytest.raises(Reached) as reached:
        run_stage(stage, monkeypatch, params, "--base", str(tiny_model_dir),
                  "--out", str(tmp_path / "adapter"), "--report", str(tmp_path / "r.json"))  # fmt: skip
    assert reached.value.seen == {"to": moved_to}


@pytest.mark.parametrize(("machine", "moved_to"), MACHINES)
def test_merge_computes_where_runtime_device_resolves(
    machine, moved_to, request, monkeypatch, tmp_path, tiny_model_dir, unloaded
) -> None:  # type: ignore[no-untyped-def]
    request.getfixturevalue(machine)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    stage = load_stage("merge", monkeypatch)
    with pytest.raises(Reached) as reached:
        run_stage(stage, monkeypatch, params_file(tmp_path, "auto"),
                  "--base", str(tiny_model_dir), "--adapter", str(adapter),
                  "--out", str(tmp_path / "merged"), "--report", str(tmp_path / "r.json"))  # fmt: skip
    assert reached.value.seen == {"to": moved_to}


@pytest.mark.parametrize("name", ["finetune", "merge"])
def test_cuda_without_a_gpu_is_refused_naming_runtime_device(
    name, no_gpu, monkeypatch, tmp_path, tiny_model_dir, unloaded
) -> None:  # type: ignore[no-untyped-def]
    stage = load_stage(name, monkeypatch)
    with pytest.raises(UserError, match=r"^runtime\.device: device cuda, but no NVIDIA GPU"):
        run_stage(stage, monkeypatch, params_file(tmp_path, "cuda"), "--base",
                  str(tiny_model_dir), "--out", str(tmp_path / "out"))  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_the_gpu_merge_path_verifies_on_host_tensors(tiny_model_dir, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The merge's GPU path, run on the CPU (its torch device answered as the CPU): the same
    verification passes, the saved weights are checked bit for bit, and the save dtype's cost
    is computed in the save dtype itself (native on a GPU), not in the CPU's compute dtype."""
    from quantbench.lora import merge

    adapter = make_adapter(tiny_model_dir, tmp_path / "adapter", seed=1)
    monkeypatch.setattr(merge, "torch_device", lambda device: "cpu")
    out = tmp_path / "merged"
    report = merge.merge_and_verify(
        tiny_model_dir, adapter, ITEMS, MergeSettings(), out, device="cuda"
    )
    assert report.passed and report.saved_weights_exact is True
    assert report.dtype_cost_computed_in == "bfloat16"
    assert Path(out / "model.safetensors").is_file()
