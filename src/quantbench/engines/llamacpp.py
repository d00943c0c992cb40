"""llama.cpp's native `llama-server`: GGUF files, continuous batching over `-np` slots.

Not `python -m llama_cpp.server`: it serializes requests and by default aborts a running request
when a new one arrives, which makes it unfit for load tests.
"""

from __future__ import annotations

import subprocess
from typing import ClassVar

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, LaunchSpec
from quantbench.engines.spec import LlamaCppSettings
from quantbench.errors import UserError


class LlamaCppEngine(Engine):
    name: ClassVar[str] = "llamacpp"
    formats: ClassVar[frozenset[str]] = frozenset({"gguf"})

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
