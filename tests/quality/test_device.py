"""Where the evaluation computes: the device the evaluate stage resolves from runtime.device,
handed to both passes' workers, and what each backend does with it (transformers: the model
moved to the GPU; llama.cpp: every layer offloaded)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, Literal

import numpy as np
import pytest
from tests.stage_script import (
    Reached,
    device_env_kept,  # noqa: F401 (autouse)
    load_stage,
    params_file,
    run_stage,
)

from quantbench.errors import UserError
from quantbench.formats import registry
from quantbench.formats.base import Format, Recipe
from quantbench.formats.registry import recipe
from quantbench.quality import backends, refcache
from quantbench.quality.windows import plan_windows
from quantbench.quality.worker import ScoreJob, run_job
from quantbench.quantize import build_variant


def evaluate(monkeypatch, tmp_path, tiny_model_dir, device: str = "auto") -> None:  # type: ignore[no-untyped-def]
    variant = tmp_path / "bf16"
    build_variant("bf16", recipe({"format": "bf16"}), tiny_model_dir, variant)
    monkeypatch.setenv(refcache.CACHE_ENV, str(tmp_path / "cache"))
    stage = load_stage("evaluate", monkeypatch)
    run_stage(stage, monkeypatch, params_file(tmp_path, device), "--name", "bf16",
              "--variant", str(variant), "--reference", str(tiny_model_dir),
              "--out", str(tmp_path / "quality.json"))  # fmt: skip


@pytest.mark.parametrize(("machine", "device"), [("fake_gpu", "cuda"), ("no_gpu", "cpu")])
def test_both_passes_run_where_runtime_device_resolves(
    machine, device, request, monkeypatch, tmp_path, tiny_model_dir
) -> None:  # type: ignore[no-untyped-def]
    from quantbench.quality import evaluate as module

    request.getfixturevalue(machine)
    jobs: list[ScoreJob] = []

    def run_isolated(job: ScoreJob) -> None:
        jobs.append(job)
        raise Reached()

    monkeypatch.setattr(module, "run_isolated", run_isolated)
    with pytest.raises(Reached):
        evaluate(monkeypatch, tmp_path, tiny_model_dir)
    assert [(job.backend, job.device) for job in jobs] == [("hf", device)]  # the reference's
    assert not (tmp_path / "quality.json").exists()


def test_cuda_without_a_gpu_is_refused_naming_runtime_device(
    no_gpu, monkeypatch, tmp_path, tiny_model_dir
) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserError, match=r"^runtime\.device: device cuda, but no NVIDIA GPU"):
        evaluate(monkeypatch, tmp_path, tiny_model_dir, device="cuda")


def job(tmp_path: Path, backend: str, device: str) -> ScoreJob:
    return ScoreJob(
        backend=backend, path=tmp_path, fmt="bf16", compute_dtype="float32", threads=1,
        n_ctx=64, ids=[1, 2, 3], windows=plan_windows(3, 64, 64),
        logprob_path=tmp_path / "lp.f32", prompts=[], max_new_tokens=1, stop_ids=frozenset({0}),
        device=device,
    )  # fmt: skip


@pytest.mark.parametrize("on_device", [True, False])
def test_the_worker_hands_the_device_to_a_backend_that_takes_one(tmp_path, on_device) -> None:
    """A backend that computes on the device is told which; one registered without
    ``on_device`` (a plugin's) is loaded with the arguments it always had."""

    def load(*args: Any, **kwargs: Any) -> None:
        raise Reached(args=args, kwargs=kwargs)

    backends.register_backend(backends.BackendKind("devrt", "test", load, on_device=on_device))
    try:
        with pytest.raises(Reached) as reached:
            run_job(job(tmp_path, "devrt", "cuda"))
    finally:
        backends._BACKENDS.pop("devrt")
    assert reached.value.seen["args"] == (tmp_path, "bf16", "float32", 64, 1)
    assert reached.value.seen["kwargs"] == ({"device": "cuda"} if on_device else {})


class DeviceSpec(Recipe):
    format: Literal["devfmt"]


class Model:
    """A loaded checkpoint that records where it is moved."""

    def __init__(self) -> None:
        self.moved_to: list[object] = []

    def to(self, target: object) -> Model:
        self.moved_to.append(target)
        return self

    def eval(self) -> Model:
        return self


class DeviceFormat(Format):
    name: ClassVar[str] = "devfmt"
    recipe_model: ClassVar[type[Recipe]] = DeviceSpec

    def build(self, request: Any) -> Any:  # pragma: no cover - not built here
        raise NotImplementedError

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        return False

    def load_hf_model(self, model_dir: Path, dtype: Any) -> Any:
        return Model()


@pytest.fixture
def device_format():  # type: ignore[no-untyped-def]
    fmt = registry.register_format(DeviceFormat())
    yield fmt
    registry._REGISTERED.pop(fmt.name, None)


@pytest.mark.parametrize(("device", "moved_to", "inputs_on"), [("cuda", ["cuda:0"], "cuda:0"),
                                                               ("cpu", [], "cpu")])  # fmt: skip
def test_transformers_runs_the_model_on_the_device(
    device, moved_to, inputs_on, tmp_path, device_format
) -> None:  # type: ignore[no-untyped-def]
    loaded = backends.get_backend("hf").load(tmp_path, "devfmt", "float32", 64, 1, device=device)
    assert isinstance(loaded, backends.HFBackend)
    # on the CPU the model is left where its format loaded it (no move at all, as before)
    assert loaded.model.moved_to == moved_to and loaded.device == inputs_on


def test_transformers_on_the_cpu_gives_the_logits_it_always_gave(tiny_model_dir) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    ids = [1, 5, 9, 12]
    with torch.inference_mode():
        plain = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].numpy()
    backend = backends.HFBackend(model, "cpu")
    assert np.array_equal(backend.logits(ids), plain)


@pytest.mark.parametrize(("device", "layers"), [("cuda", -1), ("cpu", 0)])
def test_llama_cpp_offloads_every_layer_on_a_gpu(device, layers, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from quantbench.native import llama_build

    def llama(**kwargs: Any) -> None:
        raise Reached(**kwargs)

    monkeypatch.setattr(llama_build, "load_binding", lambda: SimpleNamespace(Llama=llama))
    with pytest.raises(Reached) as reached:
        backends.get_backend("gguf").load(
            tmp_path / "m.gguf", "gguf", "float32", 64, 2, device=device
        )
    assert reached.value.seen["n_gpu_layers"] == layers
    assert reached.value.seen["n_threads"] == 2


def test_a_reference_pass_on_another_device_is_not_read_from_the_cache(tmp_path) -> None:
    assert refcache.key(job(tmp_path, "hf", "cuda"), "sha") != refcache.key(
        job(tmp_path, "hf", "cpu"), "sha"
    )
