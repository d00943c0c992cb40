"""llama.cpp's native `llama-server`: GGUF files, continuous batching over `-np` slots.

Not `python -m llama_cpp.server`: it serializes requests and by default aborts a running request
when a new one arrives, which makes it unfit for load tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineSettings, LaunchSpec
from quantbench.engines.registry import register_engine
from quantbench.errors import UserError
from quantbench.load.requests import RequestProfile

CONTEXT_ROUNDING = 256


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


class LlamaCppEngine(Engine):
    name: ClassVar[str] = "llamacpp"
    formats: ClassVar[frozenset[str]] = frozenset({"gguf"})
    settings_model: ClassVar[type[EngineSettings]] = LlamaCppSettings
    profile: ClassVar[RequestProfile] = RequestProfile(
        "llamacpp", {"stream_options": {"include_usage": True}}, ("ignore_eos",)
    )

    def _binary(self, settings: LlamaCppSettings) -> str:
        if settings.binary is None:
            from quantbench.native.llama_build import check_build, toolchain

            tc = toolchain()
            binary = tc.binary("llama-server")
            if binary.is_file():
                check_build(tc)  # a build made for another CPU may fault here: refuse it
        else:
            binary = settings.binary
        if not binary.is_file():
            raise UserError(
                f"engines.llamacpp.binary: {binary} does not exist; run `make llamacpp` "
                "to build llama-server from the pinned source release"
            )
        return str(binary.resolve())

    def launch(
        self, artifact: Artifact, settings: LlamaCppSettings, host: str, port: int
    ) -> LaunchSpec:
        argv = [self._binary(settings), "-m", str(artifact.weights.resolve())]
        argv += ["--host", host, "--port", str(port), "--alias", artifact.name]
        argv += ["-np", str(settings.parallel), "-c", str(settings.ctx_size)]
        argv += ["-t", str(settings.threads), "-tb", str(settings.threads)]
        # --jinja: render chats with the model's own template (as transformers and vLLM do), not
        # llama.cpp's built-in approximation of it.
        argv += ["-ngl", str(settings.n_gpu_layers), "--metrics", "--no-webui", "--jinja"]
        argv += ["-fa", settings.flash_attn]
        if settings.batch_size is not None:
            argv += ["-b", str(settings.batch_size)]
        argv += settings.extra_args
        return LaunchSpec(
            engine=self.name,
            argv=argv,
            env=self.base_env(settings),
            host=host,
            port=port,
            ready_path="/health",
            metrics_path="/metrics",
            model_name=artifact.name,
            startup_timeout_s=settings.startup_timeout_s,
            secret_env=tuple(settings.secret_env),
        )

    def version(self, settings: LlamaCppSettings) -> str:
        out = subprocess.run(
            [self._binary(settings), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        text = (out.stdout + out.stderr).strip().splitlines()
        return next((line for line in text if "version" in line), text[0] if text else "unknown")

    def reset_prefix_cache(self, base_url: str, settings: LlamaCppSettings) -> str:
        statuses = [
            self.post(f"{base_url}/slots/{slot}?action=erase") for slot in range(settings.parallel)
        ]
        bad = [s for s in statuses if s != 200]
        return "reset" if not bad else f"POST /slots/N?action=erase answered {bad[0]}"

    def context_limit(self, settings: LlamaCppSettings) -> tuple[int, str] | None:
        per_slot = settings.ctx_size // settings.parallel
        return per_slot, (
            f"engines.llamacpp ctx_size {settings.ctx_size} / parallel {settings.parallel}"
        )

    def max_batch(self, settings: LlamaCppSettings) -> int | None:
        return settings.parallel

    def suggest_sweep(
        self, centre: int, kv_capacity: int, input_len: int, output_len: int
    ) -> dict[str, list[Any]]:
        parallel = [p for p in (1 << i for i in range(12)) if p <= centre and p <= kv_capacity]
        parallel = parallel or [1]
        request = input_len + output_len
        ctx = -(-max(parallel) * request // CONTEXT_ROUNDING) * CONTEXT_ROUNDING
        return {"parallel": parallel, "ctx_size": [ctx]}


register_engine(LlamaCppEngine())
