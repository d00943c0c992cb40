"""Each experiment's results as one machine's: its fingerprint, its price, its best
configuration per workload, and the cost of a million good tokens there.

The figures are the experiment's own report (``reports/best_config.json``,
``reports/report_metrics.json``), its machine the fingerprint stage's ``reports/env.json``, its
price ``bench.price_per_hour`` in its own params. Several experiments from one machine (a sweep
split into experiments) are one machine: its best configuration per workload is the best of its
experiments' winners by good output throughput, the metric each report ranked by.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field

from quantbench.config import parse_config
from quantbench.decision.cost import cost_per_million_tokens
from quantbench.errors import UserError
from quantbench.gather.experiments import ExperimentFiles
from quantbench.schemas import io as schema_io
from quantbench.schemas.best_config import Estimate, NoneFound, Recommended, entry_model
from quantbench.schemas.env import EnvInfo
from quantbench.schemas.estimate import EstimatesFile, EstimateSummaryRow
from quantbench.schemas.report_metrics import ReportMetrics

BEST_CONFIG = "reports/best_config.json"
METRICS = "reports/report_metrics.json"
ENV = "reports/env.json"
ESTIMATES = "reports/estimate/estimates.json"
PARAMS = "params.yaml"
# ISA flags that change what a CPU serves at (bf16, int8, wide vectors): the fingerprint's
# The throughputs a report ranks by that a price divides: good tokens (within the SLOs) first
THROUGHPUTS = ("good_output_throughput", "output_throughput")
ISA_OF_NOTE = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")


class Interval(BaseModel):
    value: float
    low: float | None = None
    high: float | None = None


class Fingerprint(BaseModel):
    """The machine, as its fingerprint stage recorded it."""

    id: str = Field(description="sha256 of the fields below (12 hex digits): one machine kind.")
    label: str
    cpu_model: str
    logical_cores: int | None
    isa: list[str]
    gpus: list[str]
    memory_gib: float


class WorkloadBest(BaseModel):
    """One workload's (or workload:profile's) configuration to deploy on one machine."""

    workload: str
    experiment: str
    status: Literal["ranked", "none"]
    pair: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    ranked_by: str = Field(
        "good_output_throughput",
        description="The throughput the experiment's report ranked by: good output tokens/s "
        "(within the SLOs), or all output tokens/s for a profile without latency limits.",
    )
    tps: Interval | None = Field(None, description="That throughput, tokens/s.")
    cost_per_million: Interval | None = Field(
        None, description="Price per hour / (tokens/s x 3600) x 1e6, of the tokens that count "
        "(ranked_by); its interval from the throughput's (the higher cost from the lower "
        "throughput)."
    )  # fmt: skip
    slo_verdict: str | None = None
    reason: str | None = Field(None, description="Why nothing was ranked (status none).")


class PairFigure(BaseModel):
    """A pair's good tokens/s on one machine for one workload, measured at its best point."""

    pair: str
    workload: str
    good_tps: float | None
    ranked: bool


class MachineRun(BaseModel):
    """One experiment: what it measured and on which machine, at which price."""

    experiment: str
    commit: str
    fingerprint: Fingerprint | None
    price_per_hour: float | None
    currency: str
    best: list[WorkloadBest]
    pairs: list[PairFigure]
    estimates: list[EstimateSummaryRow] = Field(
        default_factory=list,
        description="The roofline's summary rows (reports/estimate/estimates.json).",
    )
    problems: list[str] = Field(default_factory=list)


def fingerprint(env: EnvInfo) -> Fingerprint:
    """The machine a run measured on, as far as it changes serving (``reports/env.json``)."""
    cpu = env.cpu
    gpus = [f"{g.name} ({g.memory_mib / 1024:.0f} GiB)" for g in env.gpus]
    isa = [f for f in ISA_OF_NOTE if f in cpu.flags]
    memory = float(env.memory_gib or 0)
    key = {
        "cpu": cpu.model,
        "cores": cpu.logical_cores,
        "isa": isa,
        "gpus": gpus,
        "memory_gib": round(memory),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    label = " + ".join(gpus) if gpus else f"{cpu.model}, {cpu.logical_cores or '?'} cores"
    return Fingerprint(
        id=digest,
        label=label,
        cpu_model=cpu.model,
        logical_cores=cpu.logical_cores,
        isa=isa,
        gpus=gpus,
        memory_gib=memory,
    )


def cost_per_million(price: float | None, tps: float | None) -> float | None:
    """The bench's cost per million tokens (decision.cost), where there is a price and a rate."""
    if price is None or tps is None:
        return None
    return cost_per_million_tokens(price, tps)


def _interval(figure: Estimate | None) -> Interval | None:
    if figure is None or figure.value is None:
        return None
    return Interval(value=figure.value, low=figure.low, high=figure.high)


def _cost(price: float | None, tps: Interval | None) -> Interval | None:
    if tps is None:
        return None
    value = cost_per_million(price, tps.value)
    if value is None:
        return None
    return Interval(
        value=value,
        low=cost_per_million(price, tps.high) if tps.high else None,
        high=cost_per_million(price, tps.low) if tps.low else None,
    )


def workload_best(
    key: str, entry: Recommended | NoneFound, experiment: str, price: float | None
) -> WorkloadBest:
    if isinstance(entry, NoneFound):
        return WorkloadBest(workload=key, experiment=experiment, status="none",
                            reason=entry.reason)  # fmt: skip
    metric = entry.ranked_by
    if metric not in THROUGHPUTS:  # a latency-ranked profile: price the good tokens
        good = entry.expected.good_output_throughput
        metric = THROUGHPUTS[0] if good is not None else THROUGHPUTS[1]
    tps = _interval(getattr(entry.expected, metric))
    return WorkloadBest(
        workload=key,
        experiment=experiment,
        status="ranked",
        pair=entry.pair,
        settings=entry.settings,
        ranked_by=metric,
        tps=tps,
        cost_per_million=_cost(price, tps),
        slo_verdict=entry.slo_verdict,
    )


def _best_config(files: ExperimentFiles, problems: list[str]) -> dict[str, Recommended | NoneFound]:
    """The experiment's best_config.json, each entry read through its schema (an entry that
    does not parse is a problem, the others are kept)."""
    text = _text(files, BEST_CONFIG, problems)
    if text is None:
        return {}
    try:
        entries, bad = schema_io.parse_entries(
            text, entry_model, f"{files.experiment.name}:{BEST_CONFIG}"
        )
    except schema_io.StageOutputError as exc:
        problems.append(str(exc))
        return {}
    problems += bad
    return dict(sorted(entries.items()))


def _text(files: ExperimentFiles, path: str, problems: list[str]) -> str | None:
    text = files.text(path)
    if text is None:
        problems.append(f"{path}: not in experiment {files.experiment.name} (or not pulled)")
    return text


def _parsed(
    files: ExperimentFiles, path: str, model: type[schema_io.M], problems: list[str]
) -> schema_io.M | None:
    """A stage output of the experiment read through its schema (migrated where older)."""
    text = _text(files, path, problems)
    if text is None:
        return None
    try:
        return schema_io.parse_text(text, model, f"{files.experiment.name}:{path}")
    except schema_io.StageOutputError as exc:
        problems.append(str(exc))
        return None


def _price(files: ExperimentFiles, problems: list[str]) -> tuple[float | None, str]:
    """``bench.price_per_hour`` and ``bench.currency`` as the experiment's params validate."""
    text = files.text(PARAMS)
    if text is None:
        problems.append(f"{PARAMS}: not in experiment {files.experiment.name}")
        return None, "USD"
    try:
        config = parse_config(yaml.safe_load(text) or {},
                              origin=f"{files.experiment.name}:{PARAMS}")  # fmt: skip
    except (UserError, yaml.YAMLError) as exc:
        problems.append(str(exc).splitlines()[0])
        return None, "USD"
    return config.bench.price_per_hour, config.bench.currency


def read_run(files: ExperimentFiles) -> MachineRun:
    """One experiment's results; what is missing becomes a problem, never an error."""
    exp = files.experiment
    problems: list[str] = []
    price, currency = _price(files, problems)
    env = _parsed(files, ENV, EnvInfo, problems)
    metrics = _parsed(files, METRICS, ReportMetrics, problems)
    estimates = _parsed(files, ESTIMATES, EstimatesFile, problems)
    best = [workload_best(key, entry, exp.name, price)
            for key, entry in _best_config(files, problems).items()]  # fmt: skip
    pairs = [
        PairFigure(
            pair=pair,
            workload=workload,
            good_tps=figures.good_output_throughput,
            ranked=figures.ranked,
        )
        for pair, per_workload in sorted((metrics.pairs if metrics else {}).items())
        for workload, figures in sorted(per_workload.items())
    ]
    return MachineRun(
        experiment=exp.name,
        commit=exp.sha,
        fingerprint=fingerprint(env) if env is not None else None,
        price_per_hour=price,
        currency=currency,
        best=best,
        pairs=pairs,
        estimates=estimates.summary if estimates is not None else [],
        problems=problems,
    )
