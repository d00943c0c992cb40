"""The whole params.yaml as one validated object: each value parsed once, passed on typed.

Each section's settings model lives in the package that uses it (`runtime.py`, `model.py`,
`data.py`, `lora/spec.py`, `formats/<format>.py`, `quality/spec.py`, `engines/<engine>.py`,
`workloads/spec.py`, `bench/spec.py`, `estimate/spec.py`, `report/spec.py`); the SLO is a typed
value (`slo.Slo`: its text and its constraints, parsed here). This module only composes them and
checks what spans sections (a pair's engine must serve its variant's format). `quantbench
validate` (which `make repro` runs first), the one-off commands and the stages that read several
sections (workloads, estimate, bench, decide, report: `load_config`) use it; the offline stages
(prepare to evaluate, calibrate, fingerprint) validate only their own sections
(`quantbench.params.section`, into the same models), so their code dependencies stay their own
(a stage that imports this module depends on every section's package). Every problem is
reported at once, each naming the key, the value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from quantbench.bench.spec import BenchSettings
from quantbench.data import DataSettings
from quantbench.engines.base import EngineSettings
from quantbench.engines.registry import engine_names, engine_settings, engines_for, get_engine
from quantbench.errors import UserError
from quantbench.estimate.spec import EstimateSettings
from quantbench.formats.base import Recipe, VariantSpecError, validate_name
from quantbench.formats.registry import get_format
from quantbench.formats.registry import recipe as parse_recipe
from quantbench.lora.spec import LoraSettings, MergeSettings
from quantbench.model import ModelSettings
from quantbench.params import (
    DEFAULT_PARAMS,
    ConfigError,
    describe,
    describe_errors,
    import_plugins,
    overlay,
    read_params,
    yaml_boolean_hint,
)
from quantbench.quality.spec import EvaluateSettings, ServedTaskSettings
from quantbench.report.spec import ReportSettings
from quantbench.runtime import RuntimeSettings
from quantbench.settings import Settings
from quantbench.slo import NO_SLO, Slo
from quantbench.workloads.spec import SAFE_LABEL, WorkloadSpec

__all__ = ["DEFAULT_PARAMS", "Config", "ConfigError", "load_config", "parse_config"]


class Config(Settings):
    """The whole params.yaml."""

    plugins: list[str] = Field(
        [],
        description="Modules (or .py files) imported first; they register engines and formats "
        "of their own (docs/EXTENDING.md).",
    )
    runtime: RuntimeSettings = RuntimeSettings()
    model: ModelSettings = ModelSettings()
    data: DataSettings = DataSettings()
    lora: LoraSettings = LoraSettings()
    merge: MergeSettings = MergeSettings()
    variants: dict[str, Any] = Field(
        {}, description="Quantized variants by name (the name is the folder, stage and row)."
    )
    evaluate: EvaluateSettings = EvaluateSettings()
    served_task: ServedTaskSettings = ServedTaskSettings()
    engines: dict[str, Any] = Field(
        {}, description="Each engine's settings by engine name (engines/<engine>.py)."
    )
    workloads: dict[str, WorkloadSpec] = Field(
        default_factory=lambda: {"chat": WorkloadSpec(name="chat", use="chat", num_requests=16)},
        description="The traffic every bench stage runs, by name: named workloads (use: chat, "
        "rag, long-generation, multi-turn, bursty) or your own prompts, conversations or trace.",
    )
    bench: BenchSettings = BenchSettings()
    estimate: EstimateSettings = EstimateSettings()
    report: ReportSettings = ReportSettings()
    slo: Slo = Field(
        NO_SLO,
        description="SLO constraints, e.g. 'ttft:p95<=500ms; tpot:p50<200ms; rps>=2' "
        "(see src/quantbench/slo.py); empty: no constraints.",
    )

    @field_validator("workloads", mode="before")
    @classmethod
    def _workloads_are_named(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {}
        for name, spec in value.items():
            if not isinstance(spec, dict):
                raise ValueError(f"workloads.{name}: expected a mapping of workload settings")
            if not SAFE_LABEL.fullmatch(str(name)):
                raise ValueError(
                    f"workloads: name {name!r} must be a plain name (letters, digits, '.', '_', "
                    "'-'): it names the workload's files and report sections"
                )
            if spec.get("name", name) != name:
                raise ValueError(f"workloads.{name}: its name is its key; leave out name:")
            out[name] = {**spec, "name": name}
        if not out:
            raise ValueError("workloads: name at least one (e.g. chat: {use: chat})")
        return out

    @model_validator(mode="after")
    def _search_points_can_reach_their_load(self) -> Config:
        search = self.bench.search
        if self.bench.mode != "search" or search.kind != "concurrency" or search.num_requests:
            return self
        for name, spec in self.workloads.items():
            if spec.precision is None and (spec.num_requests or 0) < search.max:
                raise ValueError(
                    f"workloads.{name}: the concurrency search may try {search.max:g} streams, "
                    f"but the workload measures {spec.num_requests or 'no'} requests a point: set "
                    f"bench.search.num_requests (>= {search.max:g}) or the workload's precision"
                )
        return self

    @model_validator(mode="after")
    def _pairs_are_servable(self, info: ValidationInfo) -> Config:
        if (info.context or {}).get("sections_failed"):
            return self  # a pair naming a variant or engine that failed is explained already
        for name, pair in self.bench.pairs.items():
            where = f"bench.pairs.{name}"
            if pair.engine not in self.engines:
                raise ValueError(
                    f"{where}: unknown engine {pair.engine!r}; known: {', '.join(engine_names())}"
                )
            if not self.engines[pair.engine].enabled:
                raise ValueError(
                    f"{where}: engine {pair.engine} is disabled (engines.{pair.engine}.enabled: "
                    "false); remove the pair or enable the engine"
                )
            if pair.variant not in self.variants:
                known = ", ".join(self.variants) or "none"
                raise ValueError(
                    f"{where}: no variant {pair.variant!r} under variants: ({known}); name one "
                    "of them, or add the variant under variants:"
                )
            fmt = self.variants[pair.variant].format
            if not get_engine(pair.engine).serves(fmt):
                raise ValueError(
                    f"{where}: engine {pair.engine} cannot serve {pair.variant} (format {fmt}); "
                    f"engines that serve {fmt}: {', '.join(engines_for(fmt))}"
                )
            try:
                self.pair_settings(name)
            except ConfigError as exc:
                raise ValueError(str(exc).split("\n", 1)[-1].strip()) from None
        return self

    def pair_settings(self, name: str) -> EngineSettings:
        """The engine settings a bench pair runs with: its engine's, with its own laid over."""
        pair = self.bench.pairs[name]
        return overlay(self.engine(pair.engine), pair.settings, f"bench.pairs.{name}.settings")

    def variant(self, name: str) -> Recipe:
        return self.variants[name]  # type: ignore[no-any-return]

    def engine(self, name: str) -> EngineSettings:
        return self.engines[name]  # type: ignore[no-any-return]


def _variants(raw: Any, errors: list[str]) -> dict[str, Recipe]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.append(f"variants: expected a mapping of name -> recipe, got {raw!r}")
        return {}
    out: dict[str, Recipe] = {}
    for name, entry in raw.items():
        where = f"variants.{name}"
        try:
            validate_name(str(name))
            out[str(name)] = parse_recipe(entry)
        except ValidationError as exc:
            model = get_format(entry["format"]).recipe_model
            errors.extend(describe_errors(exc, where, model))
        except (VariantSpecError, ValueError) as exc:
            fmt = entry.get("format") if isinstance(entry, dict) else None
            errors.append(f"{where}: {exc}{yaml_boolean_hint(fmt, 'literal_error')}")
    return out


def _engines(raw: Any, errors: list[str]) -> dict[str, EngineSettings]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        errors.append(f"engines: expected a mapping of engine name -> settings, got {raw!r}")
        return {}
    out: dict[str, EngineSettings] = {}
    for name in [*engine_names(), *(n for n in raw if n not in engine_names())]:
        try:
            out[name] = engine_settings(name, raw.get(name))
        except ValidationError as exc:
            errors.extend(describe_errors(exc, f"engines.{name}", get_engine(name).settings_model))
        except UserError as exc:
            errors.append(f"engines.{name}: {exc}")
    return out


def parse_config(raw: dict[str, Any] | None, origin: str = "params.yaml") -> Config:
    """Validate a parsed params mapping; raise ConfigError listing every bad key at once."""
    raw = dict(raw or {})
    if not raw:
        raise ConfigError(
            f"{origin} is empty: it must hold the pipeline's sections (model:, lora:, variants:, "
            "...); restore it with `git checkout params.yaml`"
        )
    errors: list[str] = []
    try:
        import_plugins(raw.get("plugins") or [])
    except ConfigError as exc:
        errors.append(str(exc))
    variants = _variants(raw.get("variants"), errors)
    engines = _engines(raw.get("engines"), errors)
    rest = {k: v for k, v in raw.items() if k not in ("variants", "engines")}
    if "workload" in rest:  # the single workload of earlier versions: one named workload
        if "workloads" in rest:
            errors.append("give either workloads: (several, by name) or workload: (one), not both")
        single = rest.pop("workload")
        if isinstance(single, dict):
            rest["workloads"] = {str(single.get("name", "default")): single}
    try:
        config = Config.model_validate(
            {**rest, "variants": variants, "engines": engines},
            context={"sections_failed": bool(errors)},
        )
    except ValidationError as exc:
        errors.extend(describe(e, "", Config) for e in exc.errors(include_url=False))
        config = None
    if errors or config is None:
        raise ConfigError(f"{origin} is not valid:\n  " + "\n  ".join(errors))
    return config


def load_config(path: str | Path = DEFAULT_PARAMS) -> Config:
    """Read and validate params.yaml (or another file with the same layout)."""
    return parse_config(read_params(path), origin=str(path))
