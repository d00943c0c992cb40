"""`transformers serve`: bf16, GPTQ (through gptqmodel) and AWQ (compressed-tensors) checkpoints.

Protocol quirks handled elsewhere by what this module declares: streams end without `data: [DONE]`
(the last chunk carries `usage`), the request's `model` must equal the served path exactly, and
unknown request fields get HTTP 422, so no extra request fields are declared.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path
from typing import ClassVar

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, LaunchSpec
from quantbench.engines.spec import TransformersSettings


class TransformersEngine(Engine):
    name: ClassVar[str] = "transformers"
    formats: ClassVar[frozenset[str]] = frozenset({"bf16", "gptq", "awq"})

    def launch(
        self, artifact: Artifact, settings: TransformersSettings, host: str, port: int
    ) -> LaunchSpec:
        model = str(artifact.path.resolve())
        cli = Path(sys.executable).with_name("transformers")
        argv = [str(cli), "serve", model, "--host", host, "--port", str(port)]
        argv += ["--device", settings.device, "--dtype", settings.dtype, "--log-level", "info"]
        if settings.continuous_batching:
            argv += [
                "--continuous-batching",
                "--cb-num-blocks",
                str(settings.cb_num_blocks),
                "--cb-block-size",
                str(settings.cb_block_size),
                "--cb-max-batch-tokens",
                str(settings.cb_max_batch_tokens),
            ]
        argv += settings.extra_args
        hub_cache = Path(".cache/hf-hub").resolve()
        hub_cache.mkdir(parents=True, exist_ok=True)
        env = {
            **self.base_env(settings),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            # /v1/models answers 500 unless the hub cache folder exists.
            "HF_HUB_CACHE": str(hub_cache),
        }
        return LaunchSpec(
            engine=self.name,
            argv=argv,
            env=env,
            host=host,
            port=port,
            ready_path="/health",
            metrics_path=None,
            model_name=model,
            startup_timeout_s=settings.startup_timeout_s,
        )

    def version(self, settings: TransformersSettings) -> str:
        return importlib.metadata.version("transformers")
