"""Resolve one bench pair into what running it needs (:class:`PairJob`): from the validated params
(:func:`pair_job`: its variant's artifact, engine and settings, workloads and the traffic the
workloads stage wrote, the served check's reference answers), or from objects in memory
(:func:`workloads_job`: the fault suite's stand-in engines, the harness's tests, benchmarks).
The bench stage runs the whole pair from it (:mod:`quantbench.bench.stage`); the decide stage
measures some of its rows again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantbench.bench.configured import PipelineConfig
from quantbench.bench.run import PairJob
from quantbench.bench.served_here import not_served_here, unservable_in
from quantbench.bench.spec import BenchSettings
from quantbench.bench.task import TaskJob
from quantbench.decision.gate import shown_unrankable
from quantbench.decision.margins import DecisionMargins
from quantbench.engines.artifact import Artifact, load_artifact
from quantbench.engines.base import Engine, EngineSettings
from quantbench.engines.registry import check_pair, get_engine, unservable_here
from quantbench.errors import UserError
from quantbench.fidelity import ReferenceAnswer
from quantbench.load.session import build_traffic
from quantbench.qa import load_qa
from quantbench.schemas import io as schema_io
from quantbench.schemas.quality import QualityReport
from quantbench.slo import Slo
from quantbench.workloads.spec import WorkloadSpec
from quantbench.workloads.traffic import Traffic


@dataclass(frozen=True)
class JobPaths:
    """Where a pair's inputs live (the stages' defaults; tests and tools point elsewhere)."""

    variants: Path = Path("models/variants")
    workloads: Path = Path("reports/workloads")
    quality: Path = Path("reports/quality")


def pair_job(
    config: PipelineConfig,
    name: str,
    paths: JobPaths = JobPaths(),
    with_task: bool = False,
    with_probe: bool = False,
) -> PairJob:
    """The pair ``name`` of ``bench.pairs`` as a job (no partial-results store); ``with_task``:
    with the served task to score (the bench stage's; off where served_task.enabled is);
    ``with_probe``: with the estimate's probe of its server (the bench stage's; off where the
    pair's ``probe`` is)."""
    bench = config.bench
    if name not in bench.pairs:
        raise UserError(f"pair {name!r} is not in bench.pairs; known: {', '.join(bench.pairs)}")
    pair = bench.pairs[name]
    fmt = config.variants[pair.variant].format
    check_pair(pair.variant, fmt, pair.engine)
    settings = config.pair_settings(name)
    not_served = not_served_here(bench.pairs, unservable_in(config)).get(name)
    if not_served is None and (
        why := unservable_here(name, pair.variant, fmt, pair.engine, settings)
    ):
        raise UserError(why)  # the stage run alone: refused before its server is started
    workloads = dict(config.workloads)
    quality_path = paths.quality / f"{pair.variant}.json"
    references: list[ReferenceAnswer] = []
    quality: QualityReport | None = None
    if quality_path.is_file():
        quality = schema_io.read(quality_path, QualityReport, name=pair.variant)
        references = [ReferenceAnswer.from_dict(r) for r in quality.served_reference]
    task = _task_job(config, quality) if with_task else None
    screened = None if not_served else screened_by_quality(config, quality)
    if screened is not None:
        workloads = {w: screened_workload(spec) for w, spec in workloads.items()}
    return PairJob(
        name=name,
        artifact=load_artifact(paths.variants / pair.variant, name=pair.variant),
        engine=get_engine(pair.engine),
        settings=settings,
        workloads=workloads,
        traffic={w: Traffic.read(paths.workloads, w) for w in workloads},
        slo=config.slo,
        bench=bench,
        references=references,
        task=task,
        not_served=not_served,
        screened=screened,
        probe=config.estimate.probe if with_probe and pair.probe else None,
        # the race's two margins alone: the rest of report: is not the race's (nor its resume key's)
        margins=DecisionMargins(equivalence=config.report.equivalence, drift=config.report.drift),
    )


def screened_by_quality(config: PipelineConfig, quality: QualityReport | None) -> str | None:
    """Why the pair's variant can never be ranked, shown by its quality report against
    ``report.quality``, where ``bench.quality_gated`` screens such pairs (None: measure it in
    full)."""
    if config.bench.quality_gated != "screen":
        return None
    return shown_unrankable(quality, config.report.quality)


def screened_workload(spec: WorkloadSpec) -> WorkloadSpec:
    """A workload as a screened pair runs it: its first load point only (params lists the
    highest first: the most the pair delivers, its figure in the report), and a precision-sized
    one at its floor, stopping at ``precision.min_requests``. Its lower loads would cost a
    screened pair most of its points' time (one stream's 12 serial requests, 22-26 s a pair on
    2 cores) for rows the decision can never rank."""
    first = spec.model_copy(update={"load": spec.points[:1]})
    if spec.precision is None:
        return first
    floor = spec.precision.model_copy(update={"max_requests": spec.precision.min_requests})
    return first.model_copy(update={"precision": floor})


def _task_job(config: PipelineConfig, quality: QualityReport | None) -> TaskJob | None:
    """The evaluate stage's questions, answer length and confidence, and its answers."""
    served = config.served_task
    if not served.enabled:
        return None
    evaluate = config.evaluate
    items = load_qa(config.data.heldout)
    if evaluate.heldout_limit is not None:
        items = items[: evaluate.heldout_limit]
    return TaskJob(
        items=items,
        offline=list(quality.heldout.answers) if quality is not None else None,
        max_new_tokens=evaluate.heldout_max_new_tokens,
        confidence=evaluate.confidence,
        settings=served,
    )


def workloads_job(
    name: str,
    artifact: Artifact,
    engine: Engine,
    settings: EngineSettings,
    workloads: dict[str, WorkloadSpec],
    slo: Slo,
    bench: BenchSettings,
    **extra: Any,
) -> PairJob:
    """A pair job over workloads given in memory (not read from params): their traffic built
    here, as the workloads stage builds it (random prompts need no tokenizer). ``extra``: the
    job's other fields (references, task, probe, store)."""
    return PairJob(
        name=name,
        artifact=artifact,
        engine=engine,
        settings=settings,
        workloads=workloads,
        traffic={w: build_traffic(spec, None) for w, spec in workloads.items()},
        slo=slo,
        bench=bench,
        **extra,
    )
