"""The engine contract: what an engine serves, its settings, its requests, how it starts.

An engine is one module under ``quantbench/engines/`` (or a plugin's, see docs/EXTENDING.md) that
defines an :class:`Engine` subclass and registers it. The class holds everything the rest of the
pipeline needs to know about it:

* ``formats``: the variant formats it serves;
* ``settings_model``: its section under ``engines:`` in params.yaml (an :class:`EngineSettings`);
* ``profile``: the optional request fields it accepts (:mod:`quantbench.load.requests`);
* ``launch``: the command line and environment of its server;
* ``context_limit`` and ``max_batch``: what one request may hold, and how many it runs at once
  (used by the preflight checks and the estimator's serving model);
* ``suggest_sweep``: the server settings worth sweeping around the estimator's limits;
* ``version``: what would run, without starting it.
"""

from __future__ import annotations

import itertools
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field, ValidationError, model_validator

from quantbench.engines.artifact import Artifact
from quantbench.load.requests import RequestProfile
from quantbench.runtime import thread_env
from quantbench.settings import Settings

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


class EngineSettings(Settings):
    """What every engine has: on/off, threads, start-up deadline, free-form extra arguments."""

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


class Engine(ABC):
    """One serving engine (see the module docstring for what each member is for)."""

    name: ClassVar[str]
    formats: ClassVar[frozenset[str]]
    settings_model: ClassVar[type[EngineSettings]] = EngineSettings
    profile: ClassVar[RequestProfile]

    def serves(self, fmt: str) -> bool:
        return fmt in self.formats

    @abstractmethod
    def launch(self, artifact: Artifact, settings: Any, host: str, port: int) -> LaunchSpec:
        """The command line, environment and endpoints for serving `artifact`."""

    @abstractmethod
    def version(self, settings: Any) -> str:
        """The version of the engine that would run (without starting a server)."""

    def context_limit(self, settings: Any) -> tuple[int, str] | None:
        """(tokens one request may hold, prompt included; the setting that says so), or None
        where the engine sets no limit of its own (the model's context then applies)."""
        return None

    def max_batch(self, settings: Any) -> int | None:
        """How many requests the server runs at once with these settings (None: no fixed cap)."""
        return None

    def suggest_sweep(
        self, centre: int, kv_capacity: int, input_len: int, output_len: int
    ) -> dict[str, list[Any]]:
        """Server settings worth sweeping when about ``centre`` requests should run at once and
        the KV cache holds ``kv_capacity`` full requests (the estimator's limits)."""
        return {}

    @staticmethod
    def base_env(settings: EngineSettings) -> dict[str, str]:
        return {**thread_env(settings.threads), **settings.extra_env}
