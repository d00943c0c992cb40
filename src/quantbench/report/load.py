"""Typed loaders for everything the report reads: stage outputs only, each piece optional.

Each loader reads one kind of file into a small pydantic model that keeps the fields the report
uses and ignores the rest (other stages may add fields without breaking the report). A missing or
unreadable file is not an error: it becomes a note in :attr:`ReportInputs.problems`, and the
report shows what it has.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from quantbench.bench.results import HEADLINE
from quantbench.load.records import RequestRecord, iter_records

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

# The bench stage's headline metrics, named once (bench/results.py).
HEADLINE_METRICS = tuple(HEADLINE)


class _Lenient(BaseModel):
    """Keep what the report uses; ignore fields added later by the stage that wrote the file."""

    model_config = ConfigDict(extra="ignore", frozen=True)


# ---------------------------------------------------------------------------------------------
# bench: reports/bench/<pair>/summary.json (quantbench.bench.run.run_pair)


class Interval(_Lenient):
    mean: float | None = None
    std: float | None = None
    n: int = 0
    half_width: float | None = None
    confidence: float | None = None


class BenchRow(_Lenient):
    """One (server point, load point) of one pair: repeats folded, SLO verdict, cost."""

    server_point: str = "default"
    settings: dict[str, Any] = {}
    load_point: str
    shape: dict[str, Any] | None = None
    command: list[str] = []
    env: dict[str, str] = {}
    output_throughput: float | None = None
    request_throughput: float | None = None
    goodput: float | None = None
    error_rate: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    intervals: dict[str, Interval] = {}
    repeats: int = 0
    requests: int = 0
    completed: int = 0
    failed: int = 0
    incomplete: int = 0
    errors: dict[str, int] = {}
    slo_passed: bool | None = None
    slo_passes: str | None = None
    slo_reasons: list[str] = []
    cost_per_million_tokens: float | None = None
    error: str | None = None

    @property
    def load_kind(self) -> str | None:
        kind = (self.shape or {}).get("kind")
        return str(kind) if kind in ("concurrency", "rate") else None

    @property
    def load_value(self) -> float | None:
        """Concurrency (closed loop) or arrival rate (open loop) of this point."""
        kind = self.load_kind
        value = (self.shape or {}).get(kind) if kind else None
        return float(value) if isinstance(value, int | float) else None

    @property
    def measured(self) -> bool:
        """Whether this point produced numbers (its server ran and requests completed)."""
        return not self.error and self.completed > 0

    def metric(self, name: str) -> float | None:
        value = getattr(self, name, None)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) if math.isfinite(value) else None


class ServerReport(_Lenient):
    ready_seconds: float | None = None
    peak_rss_bytes: int | None = None
    peak_gpu_bytes: int | None = None
    exit: str | None = None
    log: str | None = None
    argv: list[str] = []
    env: dict[str, str] = {}


class SearchInfo(_Lenient):
    kind: str
    edge: float | None = None
    tried: list[dict[str, Any]] = []
    runs: int = 0
    grid_size: int = 0


class ServerPoint(_Lenient):
    server_point: str = "default"
    settings: dict[str, Any] = {}
    command: list[str] = []
    env: dict[str, str] = {}
    report: ServerReport = ServerReport()
    error: str | None = None
    search: SearchInfo | None = None


class PairSummary(_Lenient):
    """One bench stage's summary.json."""

    pair: str
    variant: str
    format: str = "unknown"
    engine: str
    engine_version: str = "unknown"
    mode: str = "grid"
    slo: str = ""
    ranked_by: str = "output_throughput"
    price_per_hour: float = 0.0
    currency: str = "USD"
    server_points: int = 0
    rows: list[BenchRow] = []
    servers: list[ServerPoint] = []
    best: BenchRow | None = None
    wall_seconds: float | None = None

    def server(self, label: str) -> ServerPoint | None:
        return next((s for s in self.servers if s.server_point == label), None)


# ---------------------------------------------------------------------------------------------
# quality: reports/quality/<variant>.json (quantbench.quality.evaluate.evaluate_variant)


class KLSummary(_Lenient):
    model_config = ConfigDict(extra="allow", frozen=True)

    mean: float | None = None
    median: float | None = None
    max: float | None = None

    @property
    def high(self) -> tuple[str, float] | None:
        """The high percentile the harness reported (key like 'p99'), if any."""
        for key, value in (self.model_extra or {}).items():
            if key.startswith("p") and isinstance(value, int | float):
                return key, float(value)
        return None


class HeldoutAnswer(_Lenient):
    question: str = ""
    expected: str = ""
    got: str = ""
    ok: bool = False


class Heldout(_Lenient):
    accuracy: float | None = None
    correct: int | None = None
    total: int | None = None
    answers: list[HeldoutAnswer] = []


class QualityReport(_Lenient):
    name: str
    format: str = "unknown"
    recipe: dict[str, Any] = {}
    backend: str | None = None
    tokens: int | None = None
    perplexity: float | None = None
    reference_perplexity: float | None = None
    perplexity_ratio: float | None = None
    kl_divergence: KLSummary = KLSummary()
    top1_agreement: float | None = None
    heldout_accuracy: float | None = None
    heldout: Heldout = Heldout()
    size_bytes: int | None = None
    weights_bytes: int | None = None
    bits_per_weight: float | None = None
    memory: dict[str, int | None] = {}
    timings: dict[str, Any] = {}
    libraries: dict[str, str] = {}

    @property
    def peak_rss_bytes(self) -> int | None:
        value = self.memory.get("peak_rss_bytes")
        return int(value) if isinstance(value, int) else None


# ---------------------------------------------------------------------------------------------
# variants: models/variants/<name>/variant.json (quantbench.quantize.variant)


class VariantRecipe(_Lenient):
    name: str
    format: str = "unknown"
    recipe: dict[str, Any] = {}
    gguf_type: str | None = None
    calibration: dict[str, Any] | None = None
    libraries: dict[str, str] = {}
    source: dict[str, Any] = {}
    weights_file: str | None = None
    size_bytes: int | None = None
    weights_bytes: int | None = None
    bits_per_weight: float | None = None


# ---------------------------------------------------------------------------------------------
# estimate: reports/estimate/estimates.json (quantbench.estimate.stage.write_estimates)


class EstimatePoint(_Lenient):
    concurrency: int
    ttft_ms: float | None = None
    itl_ms: float | None = None
    output_tps: float | None = None
    request_rate: float | None = None
    fits_memory: bool | None = None


class EstimateWorkload(_Lenient):
    input_len: int | None = None
    output_len: int | None = None
    concurrency: list[int] = []


class ComparisonRow(_Lenient):
    """A row the estimate stage itself compared (present when it was given measured points)."""

    variant: str
    engine: str
    hardware: str
    setting: str | None = None
    concurrency: int
    estimated_ttft_ms: float | None = None
    measured_ttft_ms: float | None = None
    ttft_ratio: float | None = None
    estimated_tpot_ms: float | None = None
    measured_tpot_ms: float | None = None
    tpot_ratio: float | None = None
    estimated_output_tps: float | None = None
    measured_output_tps: float | None = None
    output_tps_ratio: float | None = None
    within_2x: bool | None = None


class Estimate(_Lenient):
    hardware_name: str
    variant: dict[str, Any] = {}
    engine: str = "none"
    workload: EstimateWorkload = EstimateWorkload()
    points: list[EstimatePoint] = []
    limits: dict[str, Any] = {}
    hardware: dict[str, Any] = {}
    notes: list[str] = []
    comparison: dict[str, Any] | None = None

    @property
    def variant_name(self) -> str:
        return str(self.variant.get("name", ""))

    def at(self, concurrency: int) -> EstimatePoint | None:
        return next((p for p in self.points if p.concurrency == concurrency), None)

    def comparison_rows(self) -> list[ComparisonRow]:
        rows = (self.comparison or {}).get("rows") or []
        out = []
        for row in rows:
            try:
                out.append(ComparisonRow.model_validate(row))
            except ValidationError:
                continue
        return out


# ---------------------------------------------------------------------------------------------
# provenance: env.json, merge.json, finetune.json, model_info.json


class EnvInfo(_Lenient):
    python: str | None = None
    os: str | None = None
    machine: str | None = None
    cpu: dict[str, Any] = {}
    memory_gib: float | None = None
    gpus: list[dict[str, Any]] = []
    packages: dict[str, str | None] = {}
    vllm_env: dict[str, str | None] | None = None
    llama_cpp: dict[str, Any] = {}


class Comparison(_Lenient):
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    next_token_agreement: float | None = None
    positions: int | None = None


class MergeReport(_Lenient):
    passed: bool | None = None
    failures: list[str] = []
    adapter: dict[str, Any] = {}
    base_sha256: str | None = None
    merged_sha256: str | None = None
    exactness_float32: Comparison = Comparison()
    saved_weights_exact: bool | None = None
    saved_dtype: str | None = None
    dtype_cost: dict[str, Comparison] = {}
    tolerances: dict[str, Any] = {}


class FinetuneReport(_Lenient):
    trained: bool | None = None
    accuracy_before: float | None = None
    accuracy_after: float | None = None
    steps: int | None = None
    train_seconds: float | None = None
    trainable_parameters: int | None = None
    params: dict[str, Any] = {}


class ModelInfo(_Lenient):
    source: dict[str, Any] = {}
    dtype: str | None = None
    folder_sha256: str | None = None
    size_bytes: int | None = None
    weights_sha256: dict[str, str] = {}
    architecture: dict[str, Any] = {}


# ---------------------------------------------------------------------------------------------
# raw request records: reports/bench/<pair>/<server point>/<load point>/r<k>/records.jsonl


@dataclass(frozen=True)
class PointKey:
    pair: str
    server_point: str
    load_point: str


@dataclass
class RepeatRecords:
    """The measured (non-warm-up) records of one repeat, and the percentiles it was run with."""

    repeat: int
    records: list[RequestRecord]
    percentiles: list[float] | None = None
    scenario: str | None = None


@dataclass
class ReportInputs:
    """Everything found under the inputs' root, plus notes about what was missing."""

    root: Path
    pairs: dict[str, PairSummary] = field(default_factory=dict)
    quality: dict[str, QualityReport] = field(default_factory=dict)
    variants: dict[str, VariantRecipe] = field(default_factory=dict)
    estimates: list[Estimate] = field(default_factory=list)
    env: EnvInfo | None = None
    merge: MergeReport | None = None
    finetune: FinetuneReport | None = None
    base_info: ModelInfo | None = None
    merged_info: ModelInfo | None = None
    records: dict[PointKey, list[RepeatRecords]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class InputPaths:
    """Where the stage outputs live, relative to the repository root."""

    bench: Path = Path("reports/bench")
    quality: Path = Path("reports/quality")
    variants: Path = Path("models/variants")
    estimates: Path = Path("reports/estimate/estimates.json")
    env: Path = Path("reports/env.json")
    merge: Path = Path("reports/merge.json")
    finetune: Path = Path("reports/finetune.json")
    base_info: Path = Path("models/base/model_info.json")
    merged_info: Path = Path("models/merged/model_info.json")


def _read_json(path: Path, problems: list[str], *, required: bool = False) -> Any | None:
    if not path.is_file():
        if required:
            problems.append(f"{path.as_posix()}: missing")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(f"{path.as_posix()}: unreadable ({exc})")
        return None


def _model(model: type[M], data: Any, where: Path, problems: list[str]) -> M | None:
    if data is None:
        return None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        problems.append(
            f"{where.as_posix()}: unexpected content at {loc or '(top)'}: {first['msg']}"
        )
        return None


def load_pairs(bench_dir: Path, problems: list[str]) -> dict[str, PairSummary]:
    pairs: dict[str, PairSummary] = {}
    if not bench_dir.is_dir():
        problems.append(f"{bench_dir.as_posix()}: no benchmark results yet")
        return pairs
    for folder in sorted(p for p in bench_dir.iterdir() if p.is_dir()):
        if folder.name.startswith("."):
            continue  # a bench stage's temporary folder (atomic_dir)
        path = folder / "summary.json"
        summary = _model(PairSummary, _read_json(path, problems, required=True), path, problems)
        if summary is not None:
            pairs[summary.pair] = summary
    return pairs


def load_quality(quality_dir: Path, problems: list[str]) -> dict[str, QualityReport]:
    out: dict[str, QualityReport] = {}
    if not quality_dir.is_dir():
        return out
    for path in sorted(quality_dir.glob("*.json")):
        report = _model(QualityReport, _read_json(path, problems), path, problems)
        if report is not None:
            out[report.name] = report
    return out


def load_variants(
    variants_dir: Path, names: Iterable[str], problems: list[str]
) -> dict[str, VariantRecipe]:
    out: dict[str, VariantRecipe] = {}
    for name in sorted(set(names)):
        path = variants_dir / name / "variant.json"
        recipe = _model(VariantRecipe, _read_json(path, problems), path, problems)
        if recipe is not None:
            out[name] = recipe
    return out


def load_estimates(path: Path, problems: list[str]) -> list[Estimate]:
    data = _read_json(path, problems)
    if not isinstance(data, dict):
        return []
    out = []
    for i, item in enumerate(data.get("estimates") or []):
        est = _model(Estimate, item, path.with_name(f"{path.name}#estimates[{i}]"), problems)
        if est is not None:
            out.append(est)
    return out


def _percentiles(run_dir: Path) -> tuple[list[float] | None, str | None]:
    """The percentiles and scenario name a load run used (its own summary.json), if readable."""
    path = run_dir / "summary.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        workload = data.get("workload") or {}
        pcts = workload.get("percentiles")
        return ([float(p) for p in pcts] if pcts else None), workload.get("name")
    except (OSError, ValueError, AttributeError, TypeError):
        return None, None


def load_point_records(pair_dir: Path, row: BenchRow, problems: list[str]) -> list[RepeatRecords]:
    """The measured records of each repeat of one point; [] where none were written."""
    point_dir = pair_dir / row.server_point / row.load_point
    repeats: list[RepeatRecords] = []
    for k in range(max(row.repeats, 0)):
        path = point_dir / f"r{k}" / "records.jsonl"
        if not path.is_file():
            continue
        try:
            records = [r for r in iter_records(path) if not r.warmup]
        except (OSError, ValueError) as exc:
            problems.append(f"{path.as_posix()}: unreadable ({exc})")
            continue
        pcts, scenario = _percentiles(path.parent)
        repeats.append(RepeatRecords(k, records, pcts, scenario))
    return repeats


def load_inputs(root: Path = Path("."), paths: InputPaths | None = None) -> ReportInputs:
    """Read every stage output the report uses, below ``root``."""
    paths = paths or InputPaths()
    inputs = ReportInputs(root=root)
    problems = inputs.problems
    inputs.pairs = load_pairs(root / paths.bench, problems)
    inputs.quality = load_quality(root / paths.quality, problems)
    names = {p.variant for p in inputs.pairs.values()} | set(inputs.quality)
    inputs.variants = load_variants(root / paths.variants, names, problems)
    inputs.estimates = load_estimates(root / paths.estimates, problems)
    inputs.env = _model(EnvInfo, _read_json(root / paths.env, problems), paths.env, problems)
    inputs.merge = _model(
        MergeReport, _read_json(root / paths.merge, problems), paths.merge, problems
    )
    inputs.finetune = _model(
        FinetuneReport, _read_json(root / paths.finetune, problems), paths.finetune, problems
    )
    inputs.base_info = _model(
        ModelInfo, _read_json(root / paths.base_info, problems), paths.base_info, problems
    )
    inputs.merged_info = _model(
        ModelInfo, _read_json(root / paths.merged_info, problems), paths.merged_info, problems
    )
    for name, summary in inputs.pairs.items():
        for row in summary.rows:
            if row.repeats > 0:
                key = PointKey(name, row.server_point, row.load_point)
                inputs.records[key] = load_point_records(root / paths.bench / name, row, problems)
    for name in sorted(names - set(inputs.quality)):
        problems.append(
            f"{(paths.quality / f'{name}.json').as_posix()}: missing (no quality figures)"
        )
    if not inputs.estimates:
        problems.append(f"{paths.estimates.as_posix()}: missing (no estimates beside measurements)")
    return inputs


def finite(value: Any) -> float | None:
    """A finite float, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def clean_json(value: Any) -> Any:
    """JSON-safe copy: NaN and infinities become null (browsers reject them in JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


__all__ = [
    "HEADLINE_METRICS",
    "BenchRow",
    "Estimate",
    "EstimatePoint",
    "InputPaths",
    "PairSummary",
    "PointKey",
    "QualityReport",
    "RepeatRecords",
    "ReportInputs",
    "VariantRecipe",
    "clean_json",
    "finite",
    "load_inputs",
]
