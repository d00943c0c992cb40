"""Every stage output, read back: what the decision and the report are made from, each piece
through its schema, each optional.

The decide stage plans from it (:mod:`quantbench.decision.plan`); the report stage judges it
(:mod:`quantbench.decision.profiles`) and renders it (:mod:`quantbench.report.build`). Each file
is read with :func:`quantbench.schemas.io.read` into the model its stage wrote it with
(:mod:`quantbench.schemas`), so every reader sees exactly the fields the pipeline writes, and an
older file is migrated where a migration exists. A missing, unreadable or invalid file is not an
error: it becomes a note in :attr:`ReportInputs.problems` (an old schema version that cannot be
migrated names the stage to rerun), and the report shows what it has.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from quantbench.exchange.figures import ImportedRuns
from quantbench.load.records import RequestRecord, iter_records
from quantbench.load.session import verdict_level
from quantbench.ports import is_loopback
from quantbench.schemas import io as schema_io
from quantbench.schemas.base import StageOutput
from quantbench.schemas.bench import HEADLINE_FIGURES, BenchRow, PairSummary
from quantbench.schemas.decide import ConfirmFile
from quantbench.schemas.env import EnvInfo
from quantbench.schemas.estimate import EstimatesFile, PairPrediction, VariantEstimate
from quantbench.schemas.finetune import FinetuneReport
from quantbench.schemas.io import StageOutputError
from quantbench.schemas.merge import MergeReport
from quantbench.schemas.model_info import BaseModelInfo, MergedModelInfo
from quantbench.schemas.quality import QualityReport
from quantbench.schemas.session import PointResult, SessionSummary
from quantbench.schemas.variant import VariantRecord
from quantbench.slo import Slo
from quantbench.workloads.spec import PrecisionSpec

log = logging.getLogger(__name__)
M = TypeVar("M", bound=StageOutput)

# The bench stage's headline figures, named once (schemas/bench.py).
HEADLINE_METRICS = HEADLINE_FIGURES


# ---------------------------------------------------------------------------------------------
# raw request records:
# reports/bench/<pair>/<server point>/<workload>/<load point>/r<k>/records.jsonl


@dataclass(frozen=True)
class PointKey:
    pair: str
    server_point: str
    workload: str
    load_point: str


@dataclass
class RepeatRecords:
    """Every record of one repeat (all phases: the window's throughput counts warm-up and
    cool-down tokens inside it), and the run's own summary.json where it could be read."""

    repeat: int
    records: list[RequestRecord]
    session: SessionSummary | None = None

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records if r.phase == "measured"]

    @property
    def percentiles(self) -> list[float] | None:
        return self.session.percentiles if self.session is not None else None

    @property
    def scenario(self) -> str | None:
        return self.session.scenario if self.session is not None else None

    @property
    def fixed_output_length(self) -> bool:
        workload = self.session.workload if self.session is not None else {}
        return bool(workload.get("fixed_output_length", False))

    def verdict_confidence(self, confidence: float) -> float | None:
        """The level the bench judged this run's SLO verdicts at, where its workload's early-pass
        design made it other than ``confidence`` (None: ``confidence``)."""
        if self.session is None or not self.session.slo:
            return None
        precision = (self.session.workload or {}).get("precision")
        if precision is None:
            return None
        spec = PrecisionSpec.model_validate(precision)
        return verdict_level(spec, Slo(self.session.slo).constraints, confidence)

    def point(self, load_point: str) -> PointResult | None:
        """The run's own result of this point (as the bench stage computed it)."""
        if self.session is None:
            return None
        return next((p for p in self.session.points if p.point == load_point), None)


@dataclass
class ReportInputs:
    """Everything found under the inputs' root, plus notes about what was missing."""

    root: Path
    pairs: dict[str, PairSummary] = field(default_factory=dict)
    not_served: dict[str, str] = field(default_factory=dict)
    """The bench pairs that started no server on this machine, and why (``PairSummary.not_served``:
    a pair its engine cannot serve here standing aside for its fallback, or a fallback not needed
    here). Kept out of ``pairs``: they measured nothing and take no part in any decision."""
    quality: dict[str, QualityReport] = field(default_factory=dict)
    variants: dict[str, VariantRecord] = field(default_factory=dict)

    @property
    def screened(self) -> dict[str, str]:
        """The pairs measured at their floor because the quality gate excludes their variant
        (``PairSummary.screened``), and why."""
        return {name: s.screened for name, s in sorted(self.pairs.items()) if s.screened}

    imported: list[ImportedRuns] = field(default_factory=list)
    """Other tools' runs, as ``quantbench import`` wrote them to ``imports/``."""
    estimates: list[VariantEstimate] = field(default_factory=list)
    predictions: list[PairPrediction] = field(default_factory=list)
    env: EnvInfo | None = None
    merge: MergeReport | None = None
    finetune: FinetuneReport | None = None
    base_info: BaseModelInfo | None = None
    merged_info: MergedModelInfo | None = None
    records: dict[PointKey, list[RepeatRecords]] = field(default_factory=dict)
    confirm: ConfirmFile | None = None
    """The decide stage's confirming measurements (None: the stage has not run)."""
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class InputPaths:
    """Where the stage outputs live, relative to the repository root."""

    bench: Path = Path("reports/bench")
    quality: Path = Path("reports/quality")
    variants: Path = Path("models/variants")
    estimates: Path = Path(EstimatesFile.OUTPUT)
    env: Path = Path(EnvInfo.OUTPUT)
    merge: Path = Path(MergeReport.OUTPUT)
    finetune: Path = Path(FinetuneReport.OUTPUT)
    base_info: Path = Path(BaseModelInfo.OUTPUT)
    merged_info: Path = Path(MergedModelInfo.OUTPUT)
    confirm: Path = Path(ConfirmFile.OUTPUT)
    imports: Path = Path("imports")


def read_output(
    path: Path,
    model: type[M],
    problems: list[str],
    *,
    required: bool = False,
    **names: Any,
) -> M | None:
    """One stage output through its schema; None (and a note) where it cannot be had.

    A missing file is noted only when ``required``; every other problem (unreadable JSON,
    content that is not the schema, a version that cannot be migrated) always is.
    """
    if not path.is_file():
        if required:
            problems.append(f"{path.as_posix()}: missing")
        return None
    try:
        return schema_io.read(path, model, **names)
    except schema_io.StageOutputError as exc:
        problems.append(str(exc))
        return None


def load_pairs(
    bench_dir: Path, problems: list[str], not_served: dict[str, str] | None = None
) -> dict[str, PairSummary]:
    """Every bench summary that measured on this machine; a pair that started no server goes
    to ``not_served`` (pair -> why) instead."""
    pairs: dict[str, PairSummary] = {}
    if not bench_dir.is_dir():
        problems.append(f"{bench_dir.as_posix()}: no benchmark results yet")
        return pairs
    for folder in sorted(p for p in bench_dir.iterdir() if p.is_dir()):
        if folder.name.startswith("."):
            continue  # a bench stage's temporary folder (atomic_dir)
        path = folder / "summary.json"
        summary = read_output(path, PairSummary, problems, required=True, pair=folder.name)
        if summary is not None and summary.not_served:
            if not_served is not None:
                not_served[summary.pair] = summary.not_served
        elif summary is not None:
            pairs[summary.pair] = summary
    return pairs


def load_quality(quality_dir: Path, problems: list[str]) -> dict[str, QualityReport]:
    out: dict[str, QualityReport] = {}
    if not quality_dir.is_dir():
        return out
    for path in sorted(quality_dir.glob("*.json")):
        report = read_output(path, QualityReport, problems, name=path.stem)
        if report is not None:
            out[report.name] = report
    return out


def load_variants(
    variants_dir: Path, names: Iterable[str], problems: list[str]
) -> dict[str, VariantRecord]:
    out: dict[str, VariantRecord] = {}
    for name in sorted(set(names)):
        path = variants_dir / name / "variant.json"
        record = read_output(path, VariantRecord, problems, name=name)
        if record is not None:
            out[name] = record
    return out


def load_estimates(
    path: Path, problems: list[str]
) -> tuple[list[VariantEstimate], list[PairPrediction]]:
    """The variant estimates and the per-pair predictions (quantbench.estimate.pairs)."""
    found = read_output(path, EstimatesFile, problems)
    if found is None:
        return [], []
    return list(found.estimates), list(found.pairs)


def _session(
    run_dir: Path, key: PointKey, repeat: int, problems: list[str]
) -> SessionSummary | None:
    """The load run's own summary.json (its percentiles, scenario, checks), if there is one."""
    return read_output(
        run_dir / "summary.json",
        SessionSummary,
        problems,
        pair=key.pair,
        server_point=key.server_point,
        workload=key.workload,
        load_point=key.load_point,
        repeat=repeat,
    )


def load_point_records(
    pair_dir: Path, row: BenchRow, problems: list[str], pair: str = ""
) -> list[RepeatRecords]:
    """The records of each repeat of one point (every phase); [] where none were written."""
    point_dir = pair_dir / row.server_point / row.workload / row.load_point
    key = PointKey(pair or pair_dir.name, row.server_point, row.workload, row.load_point)
    repeats: list[RepeatRecords] = []
    for k in range(max(row.repeats, 0)):
        path = point_dir / f"r{k}" / "records.jsonl"
        if not path.is_file():
            continue
        try:
            records = list(iter_records(path))
        except (OSError, ValueError, StageOutputError) as exc:
            problems.append(f"{path.as_posix()}: unreadable ({exc})")
            continue
        repeats.append(RepeatRecords(k, records, _session(path.parent, key, k, problems)))
    return repeats


def workload_order(pairs: dict[str, PairSummary]) -> list[str]:
    """Every workload any bench stage ran, in the order the stages list them."""
    seen: dict[str, None] = {}
    for _, summary in sorted(pairs.items()):
        for name in [*summary.workloads, *(r.workload for r in summary.rows)]:
            seen.setdefault(name, None)
    return list(seen)


def _slo_texts(pairs: dict[str, PairSummary], workload: str) -> dict[str, str]:
    return {
        name: summary.slos[workload]
        for name, summary in sorted(pairs.items())
        if workload in summary.slos
    }


def workload_slos(pairs: dict[str, PairSummary], fallback: str = "") -> dict[str, str]:
    """Each workload's SLO profile as the bench stages judged it (``fallback`` where no stage
    names one)."""
    out: dict[str, str] = {}
    for workload in workload_order(pairs):
        texts = _slo_texts(pairs, workload)
        out[workload] = next(iter(texts.values())) if texts else fallback
    return out


def slo_conflicts(pairs: dict[str, PairSummary]) -> list[str]:
    """A note per workload the bench stages judged by different SLOs (a stage run before the
    workload's SLO changed): the report uses the first pair's."""
    notes = []
    for workload in workload_order(pairs):
        texts = _slo_texts(pairs, workload)
        if len(set(texts.values())) > 1:
            notes.append(
                f"workload {workload}: the bench stages judged it by different SLOs ("
                + "; ".join(f"{p}: {t!r}" for p, t in texts.items())
                + f"); the report uses {next(iter(texts.values()))!r}. Rerun the stale "
                "`dvc repro bench@<pair>` stages"
            )
    return notes


def exposed_servers(inputs: ReportInputs) -> list[str]:
    """A note per pair whose servers bound a non-loopback address (bench.allow_non_loopback):
    reachable from other machines while they ran, which a reader of the figures should know."""
    notes = []
    for name, summary in sorted(inputs.pairs.items()):
        if not is_loopback(summary.host):
            notes.append(
                f"bench@{name}: its servers bound {summary.host}, reachable from other machines "
                "while they ran (bench.allow_non_loopback is on)"
            )
    return notes


def load_imported(folder: Path, problems: list[str]) -> list[ImportedRuns]:
    """Every ``imports/*.json`` (``quantbench import``'s files); an unreadable one is a problem."""
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out.append(ImportedRuns.model_validate_json(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            first = str(exc).splitlines()[0]
            problems.append(
                f"{path.as_posix()}: not a file `quantbench import` wrote ({first}); import the "
                "tool's own result file again: `quantbench import <file>`"
            )
    return out


def load_inputs(root: Path = Path("."), paths: InputPaths | None = None) -> ReportInputs:
    """Read every stage output the report uses, below ``root``."""
    paths = paths or InputPaths()
    inputs = ReportInputs(root=root)
    problems = inputs.problems
    inputs.pairs = load_pairs(root / paths.bench, problems, inputs.not_served)
    inputs.quality = load_quality(root / paths.quality, problems)
    names = {p.variant for p in inputs.pairs.values()} | set(inputs.quality)
    inputs.variants = load_variants(root / paths.variants, names, problems)
    inputs.estimates, inputs.predictions = load_estimates(root / paths.estimates, problems)
    inputs.env = read_output(root / paths.env, EnvInfo, problems)
    inputs.merge = read_output(root / paths.merge, MergeReport, problems)
    inputs.finetune = read_output(root / paths.finetune, FinetuneReport, problems)
    inputs.base_info = read_output(root / paths.base_info, BaseModelInfo, problems)
    inputs.merged_info = read_output(root / paths.merged_info, MergedModelInfo, problems)
    inputs.confirm = read_output(root / paths.confirm, ConfirmFile, problems)
    inputs.imported = load_imported(root / paths.imports, problems)
    for name, summary in inputs.pairs.items():
        for row in summary.rows:
            if row.repeats > 0:
                key = PointKey(name, row.server_point, row.workload, row.load_point)
                inputs.records[key] = load_point_records(
                    root / paths.bench / name, row, problems, pair=name
                )
    problems.extend(slo_conflicts(inputs.pairs))
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
    "InputPaths",
    "PointKey",
    "RepeatRecords",
    "ReportInputs",
    "clean_json",
    "exposed_servers",
    "finite",
    "load_inputs",
    "read_output",
    "slo_conflicts",
    "workload_order",
    "workload_slos",
]
