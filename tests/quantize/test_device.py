"""Where the calibrating quantizers compute: the device the quantize stage resolves from
runtime.device, down to what GPTQModel and llm-compressor are handed (each stops the stage
there, before any layer is quantized)."""

from __future__ import annotations

import pytest
from tests.stage_script import (
    Reached,
    device_env_kept,  # noqa: F401 (autouse)
    load_stage,
    params_file,
    run_stage,
)

from quantbench.errors import UserError

MACHINES = [("fake_gpu", "cuda:0"), ("no_gpu", "cpu")]


@pytest.fixture
def gptq_stops_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from gptqmodel import GPTQModel

    def load(path: str, config: object = None, **kwargs: object) -> None:
        raise Reached(
            quantize_on=getattr(config, "device", None),
            load_kwargs=sorted(kwargs),
            dtype=str(kwargs.get("dtype")),
        )

    monkeypatch.setattr(GPTQModel, "load", load)


class Model:
    """What from_pretrained returns here: where it is moved is recorded."""

    def __init__(self) -> None:
        self.moved_to: list[object] = []

    def to(self, *args: object, **kwargs: object) -> Model:
        self.moved_to.append(args[0] if args else kwargs.get("device"))
        return self


@pytest.fixture
def oneshot_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """llm-compressor's oneshot, answering with where the model is and where its pipeline
    would onload layers to, and whether cached activations would be pinned."""
    import llmcompressor
    from llmcompressor.pipelines.cache import IntermediatesCache
    from llmcompressor.pipelines.sequential import pipeline
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: Model())
    pinning = IntermediatesCache.pin_memory

    def oneshot(model: Model, **kwargs: object) -> None:
        raise Reached(
            moved_to=model.moved_to,
            onload=str(pipeline.get_main_device()),
            pins=IntermediatesCache.pin_memory is pinning,
        )

    monkeypatch.setattr(llmcompressor, "oneshot", oneshot)


def quantize(monkeypatch, tmp_path, tiny_model_dir, name: str, device: str = "auto") -> Reached:  # type: ignore[no-untyped-def]
    stage = load_stage("quantize", monkeypatch)
    with pytest.raises(Reached) as reached:
        run_stage(stage, monkeypatch, params_file(tmp_path, device), "--name", name,
                  "--merged", str(tiny_model_dir), "--out", str(tmp_path / name),
                  "--timing-out", str(tmp_path / "timing.json"))  # fmt: skip
    assert not (tmp_path / name).exists()  # nothing half-built left behind
    return reached.value


@pytest.mark.parametrize(("machine", "on"), MACHINES)
def test_gptq_quantizes_where_runtime_device_resolves(
    machine, on, request, monkeypatch, tmp_path, tiny_model_dir, gptq_stops_at_load
) -> None:  # type: ignore[no-untyped-def]
    from quantbench.native.dtype import compute_dtype

    request.getfixturevalue(machine)
    seen = quantize(monkeypatch, tmp_path, tiny_model_dir, "gptq-w4g64").seen
    # GPTQModel's quantize path reads its device from the config alone (load(device=) beside
    # it is refused), and left unset it picks any GPU torch sees
    assert seen["quantize_on"] == on
    assert "device" not in seen["load_kwargs"] and "device_map" not in seen["load_kwargs"]
    # calibrated in bf16 on a GPU, in what this CPU computes fastest on the CPU
    assert seen["dtype"] == f"torch.{'bfloat16' if on != 'cpu' else compute_dtype()}"


@pytest.mark.parametrize("name", ["awq-w4g64", "w8a8"])
@pytest.mark.parametrize(("machine", "on"), MACHINES)
def test_llm_compressor_calibrates_where_runtime_device_resolves(
    machine, on, name, request, monkeypatch, tmp_path, tiny_model_dir, oneshot_stops
) -> None:  # type: ignore[no-untyped-def]
    from llmcompressor.pipelines.sequential import pipeline

    request.getfixturevalue(machine)
    before = pipeline.get_main_device
    seen = quantize(monkeypatch, tmp_path, tiny_model_dir, name).seen
    # the whole model on the device, the pipeline onloading to the same (it would pick any GPU
    # torch sees), page-locked activations only where there is a GPU to copy them to
    assert seen == {"moved_to": [on], "onload": on, "pins": on != "cpu"}
    assert pipeline.get_main_device is before  # put back after the call, failed or not


def test_cuda_without_a_gpu_is_refused_naming_runtime_device(
    no_gpu, monkeypatch, tmp_path, tiny_model_dir
) -> None:  # type: ignore[no-untyped-def]
    stage = load_stage("quantize", monkeypatch)
    with pytest.raises(UserError, match=r"^runtime\.device: device cuda, but no NVIDIA GPU"):
        run_stage(stage, monkeypatch, params_file(tmp_path, "cuda"), "--name", "bf16",
                  "--merged", str(tiny_model_dir), "--out", str(tmp_path / "bf16"))  # fmt: skip
    assert not (tmp_path / "bf16").exists()
