"""The engine contract: which formats an engine serves and how its server is launched."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from quantbench.engines.artifact import Artifact
from quantbench.engines.spec import EngineSettings
from quantbench.runtime import thread_env

REDACTED = "***"
SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd"})


def is_secret_name(name: str) -> bool:
    """Whether a flag or variable name holds a secret: a word of it (split at - and _) is one
    of SECRET_WORDS, so `--api-key` and `HF_TOKEN` are, `--max-num-batched-tokens` is not."""
    return any(word in SECRET_WORDS for word in re.split(r"[-_]+", name.lower()))


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server and talk to it. argv is a list: no shell, ever."""

    engine: str
    argv: list[str]
    env: dict[str, str]
    host: str
    port: int
    ready_path: str
    metrics_path: str | None
    model_name: str
    startup_timeout_s: float

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def redacted_argv(self) -> list[str]:
        """argv with the values of secret flags hidden (`--api-key V`, `--hf-token=V`), for
        logs and reports."""
        out: list[str] = []
        hide = False
        for arg in self.argv:
            flag, eq, _ = arg.partition("=")
            if hide:
                out.append(REDACTED)
                hide = False
            elif arg.startswith("--") and is_secret_name(flag):
                out.append(f"{flag}={REDACTED}" if eq else arg)
                hide = not eq
            else:
                out.append(arg)
        return out

    def redacted_env(self) -> dict[str, str]:
        """The extra environment with the values of secret variables (HF_TOKEN, ...) hidden."""
        return {k: REDACTED if is_secret_name(k) else v for k, v in self.env.items()}


class Engine(ABC):
    """One serving engine."""

    name: ClassVar[str]
    formats: ClassVar[frozenset[str]]

    def serves(self, fmt: str) -> bool:
        return fmt in self.formats

    @abstractmethod
    def launch(self, artifact: Artifact, settings: Any, host: str, port: int) -> LaunchSpec:
        """The command line, environment and endpoints for serving `artifact`."""

    @abstractmethod
    def version(self, settings: Any) -> str:
        """The version of the engine that would run (without starting a server)."""

    @staticmethod
    def base_env(settings: EngineSettings) -> dict[str, str]:
        return {**thread_env(settings.threads), **settings.extra_env}
