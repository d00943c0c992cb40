"""How long the bench stages will take, before any server starts (`quantbench plan`).

For each bench pair, each server setting of its sweep and each workload, the points it will run
and the time they take:

* a grid point of ``c`` closed-loop streams sends its warm-up and measured conversations (the
  most its precision target allows, or its ``num_requests``); a stream spends ``turns x E2E(c)
  + (turns - 1) x think`` on one, so the point takes ``conversations x that / c``. An open-loop
  point at ``r`` conversations a second takes ``conversations / r`` plus one conversation's
  time to drain;
* a search point runs the loads the search would try if the prediction were the truth (the
  search itself run on the predicted pass/fail: where the edge is, how many runs it takes);
* the race (``bench.race``): a precision-sized grid point whose predicted throughput is at most
  1/CLEAR_MISS of a point run before it in the pair (same workload, predicted to pass) is priced
  where the race stops it: a closed loop at its first look (its streams' ceiling, 4 requests),
  an open loop at its workload's ``min_requests``; the skips across settings are not counted
  (they can only shorten the run);
* each server start costs what it cost when this pair last ran (its ``ready_seconds``), else
  the engine's typical start (``Engine.startup_estimate_s``), plus its warm-up and served check;
* the fine-tune's task, scored once per pair on its first server (bench/task.py), takes its
  questions x (TTFT + answer length x TPOT) one stream at a time, at the first workload's
  predicted single-stream pace, divided by ``served_task.concurrency``.

E2E comes from the roofline's prediction for the pair, setting and workload on this machine
(:mod:`quantbench.estimate.pairs`). Under batching on a CPU the roofline is optimistic (up to 2x
on throughput, docs/ESTIMATE.md), so the plan is a lower bound there; the comparison against the
default run's real durations is in docs/BENCH.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from quantbench.bench.search import find_edge
from quantbench.bench.spec import BenchSettings
from quantbench.estimate.pipeline import slo_targets
from quantbench.load.session import early_pass_look
from quantbench.schemas.roofline import PairPrediction
from quantbench.slo import NO_SLO, Slo, fail_limits, fewest_to_pass
from quantbench.workloads.plan import Precision
from quantbench.workloads.spec import ClosedLoop, OpenLoop, WorkloadSpec

SERVER_CHECK_S = 15.0
"""Warm-up and the served check of one server start (a dozen short greedy answers)."""


@dataclass(frozen=True)
class TrafficShape:
    """What one conversation of a workload is, on average (its generated traffic's summary)."""

    turns: float = 1.0
    think_s: float = 0.0


@dataclass
class PointPlan:
    server_point: str
    workload: str
    load_point: str
    conversations: int | None
    seconds: float | None


@dataclass
class PairPlan:
    pair: str
    startup_s: float
    points: list[PointPlan] = field(default_factory=list)
    server_points: int = 1
    task_s: float | None = 0.0
    """The served task's time (0: not asked; None: no prediction to time it by)."""
    probe_s: float | None = 0.0
    """The estimate's probe of the pair's server, made by its bench (0: not asked)."""

    @property
    def seconds(self) -> float | None:
        each = [p.seconds for p in self.points]
        if any(s is None for s in each) or self.task_s is None or self.probe_s is None:
            return None
        return (
            sum(s for s in each if s is not None)
            + self.server_points * (self.startup_s + SERVER_CHECK_S)
            + self.task_s
            + self.probe_s
        )


@dataclass(frozen=True)
class TaskShape:
    """The served task of a pair: its questions, answer length and concurrency (0 questions:
    not asked)."""

    questions: int = 0
    max_new_tokens: int = 0
    concurrency: int = 1
    answer_tokens: float | None = None
    """The answers' mean length in tokens (their stop token included), at most
    ``max_new_tokens``; None: priced at the cap. The held-out set's reference answers say it:
    about 15 tokens where the cap is 32, so the cap priced the task at twice its time."""

    @property
    def tokens(self) -> float:
        """The tokens a question's answer is priced at."""
        if self.answer_tokens is None:
            return float(self.max_new_tokens)
        return min(float(self.max_new_tokens), self.answer_tokens)


@dataclass(frozen=True)
class ProbeShape:
    """The estimate's probe a pair's bench sends its server before its points
    (:mod:`quantbench.estimate.pair_probe`): ``alone`` requests one at a time, then 2, 3, ...
    ``batch`` together, each answer ``output_tokens`` long, on the setting ``server_point``
    (``alone`` 0: no probe)."""

    alone: int = 0
    batch: int = 1
    output_tokens: int = 32
    server_point: str = ""


def _request_s(prediction: PairPrediction, concurrency: int, tokens: float) -> float | None:
    """One request's time at the highest predicted concurrency not above ``concurrency``."""
    below = [p for p in prediction.points if p.concurrency <= concurrency]
    if not below:
        return None
    point = max(below, key=lambda p: p.concurrency)
    tpot_ms = point.itl_ms if point.itl_ms is not None else 0.0
    return (point.ttft_ms + tokens * tpot_ms) / 1000


def probe_s(prediction: PairPrediction | None, probe: ProbeShape) -> float | None:
    """The probe's time: its requests alone one after the other, then each group of k sent
    together, which ends with its slowest, timed at the pace predicted for k streams."""
    if probe.alone == 0:
        return 0.0
    if prediction is None:
        return None
    times = [_request_s(prediction, 1, probe.output_tokens)]
    times += [_request_s(prediction, k, probe.output_tokens) for k in range(2, probe.batch + 1)]
    if any(t is None for t in times):
        return None
    alone, *groups = (t for t in times if t is not None)
    return probe.alone * alone + sum(groups)


def task_s(prediction: PairPrediction | None, task: TaskShape) -> float | None:
    """The served task's time at the predicted pace of its concurrency (None: no prediction).

    Each question costs TTFT + its answer's length (``TaskShape.tokens``) x ITL at the highest
    predicted concurrency that is
    not above the task's, and that many are answered at once: an engine that batches worse than
    predicted is priced at a lower concurrency, never a higher one."""
    if task.questions == 0:
        return 0.0
    if prediction is None:
        return None
    below = [p for p in prediction.points if p.concurrency <= task.concurrency]
    if not below:
        return None
    point = max(below, key=lambda p: p.concurrency)
    one = _request_s(prediction, point.concurrency, task.tokens)
    return None if one is None else task.questions * one / point.concurrency


def conversation_s(prediction: PairPrediction | None, concurrency: int, shape: TrafficShape):  # type: ignore[no-untyped-def]
    """One stream's time for one conversation at this concurrency (None: no prediction)."""
    if prediction is None:
        return None
    point = prediction.at(max(1, min(concurrency, max(p.concurrency for p in prediction.points))))
    if point is None:
        return None
    return shape.turns * point.e2e_s + max(0.0, shape.turns - 1) * shape.think_s


# a predicted latency this many times its limit is priced as a fail shown at its first looks
# (the roofline's figure is no percentile: a point predicted near its limit may pass or fail)
CLEAR_MISS = 1.5


def decided_at(
    spec: WorkloadSpec, i: int, prediction: PairPrediction | None, slo: Slo, confidence: float
) -> int | None:
    """The measured requests after which point i stops if the prediction were the truth: its
    early-pass design's first look where every SLO limit is predicted met at its load, or the
    first look that can show a fail (quantbench.load.dispatch: Precision.fail_level)
    where TTFT or the per-token time is predicted at least CLEAR_MISS times its limit; None
    where it runs to its cap (no precision, no prediction, an open loop, a prediction near a
    limit)."""

    point = spec.points[i]
    precision = spec.precision
    if prediction is None or precision is None or not isinstance(point, ClosedLoop):
        return None
    judged_by = spec.slo_text(slo)
    constraints = judged_by.constraints
    at = prediction.at(point.concurrency) or prediction.points[-1]
    targets = slo_targets(judged_by)
    itl = at.itl_ms if at.itl_ms is not None else 0.0
    if predicted_pass(spec, i, prediction, slo):
        return early_pass_look(precision, constraints, confidence)
    missed = {"ttft": at.ttft_ms >= CLEAR_MISS * targets.ttft_ms,
              "tpot": itl >= CLEAR_MISS * targets.itl_ms}  # fmt: skip
    every = Precision.check_every
    level = Precision.fail_level(precision.confidence, precision.max_requests)
    shown = [
        fewest_to_pass(1 - pct / 100, level)
        for metric, pct, _ in fail_limits(constraints)
        if missed.get(metric)
    ]
    return -(-min(shown) // every) * every if shown else None


def predicted_pass(spec: WorkloadSpec, i: int, prediction: PairPrediction | None, slo: Slo) -> bool:
    """Whether closed-loop point i meets every latency limit of its SLO as predicted."""
    point = spec.points[i]
    if prediction is None or not isinstance(point, ClosedLoop):
        return False
    at = prediction.at(point.concurrency) or prediction.points[-1]
    targets = slo_targets(spec.slo_text(slo))
    itl = at.itl_ms if at.itl_ms is not None else 0.0
    return at.ttft_ms <= targets.ttft_ms and itl <= targets.itl_ms


def predicted_rate(
    spec: WorkloadSpec, i: int, prediction: PairPrediction | None, shape: TrafficShape
) -> float | None:
    """Closed-loop point i's predicted conversations a second (its streams over one stream's
    time for a conversation); None for an open loop or without a prediction."""
    point = spec.points[i]
    if not isinstance(point, ClosedLoop):
        return None
    per = conversation_s(prediction, point.concurrency, shape)
    return None if not per else point.concurrency / per


def grid_point(
    spec: WorkloadSpec,
    i: int,
    prediction: PairPrediction | None,
    shape: TrafficShape,
    slo: Slo = NO_SLO,
    confidence: float = 0.95,
    leader_rate: float | None = None,
) -> PointPlan:
    """Point i's conversations and time; ``leader_rate``: the highest predicted rate of the
    pair's points run before it that are predicted to pass (the race's leader, bench.race)."""
    point = spec.points[i]
    label = spec.point_label(i)
    n, seconds = spec.point_size(i)
    n = decided_at(spec, i, prediction, slo, confidence) or n
    rate = predicted_rate(spec, i, prediction, shape)
    if spec.precision is not None and leader_rate and rate and leader_rate >= CLEAR_MISS * rate:
        # the race stops it: a closed loop at its first look, on its streams' ceiling (a stream
        # delivers at most a token per min(TTFT, TPOT): load/race.py), an open loop on its
        # interval, from min_requests
        first = spec.precision.min_requests
        if isinstance(point, ClosedLoop):
            first = min(Precision.check_every, first)
        n = min(n or first, first)
    warm = spec.warmup_for(point)
    if isinstance(point, ClosedLoop):
        per = conversation_s(prediction, point.concurrency, shape)
        if per is None:
            return PointPlan("", spec.name or "", label, n, None)
        if seconds is not None:  # time-boxed: warm-up, the window, then the last ones drain
            return PointPlan(
                "", spec.name or "", label, n, warm * per / point.concurrency + seconds + per
            )
        total = (n or 0) + warm
        return PointPlan("", spec.name or "", label, total, total * per / point.concurrency)
    assert isinstance(point, OpenLoop)
    per = conversation_s(prediction, 1, shape) or 0.0
    if seconds is not None:
        return PointPlan("", spec.name or "", label, n, seconds + per)
    total = (n or 0) + warm
    return PointPlan("", spec.name or "", label, total, total / point.rate + per)


def search_points(
    spec: WorkloadSpec,
    bench: BenchSettings,
    slo: Slo,
    prediction: PairPrediction | None,
    shape: TrafficShape,
) -> list[PointPlan]:
    """The loads the search would try if the prediction were the truth, each timed."""
    search = bench.search
    name = spec.name or ""
    if prediction is None or search.kind != "concurrency":
        return [PointPlan("", name, "search", None, None)]  # not timed: no prediction
    targets = slo_targets(spec.slo_text(slo))

    def passes(load: float) -> bool:
        at = prediction.at(int(load)) or prediction.points[-1]
        return at.ttft_ms <= targets.ttft_ms and (at.itl_ms is None or at.itl_ms <= targets.itl_ms)

    edge = find_edge(
        passes,
        search.start,
        search.max,
        integer=True,
        confirm=search.confirm,
        max_runs=search.max_runs,
    )
    out = []
    for load, _ in edge.tried:
        c = int(load)
        per = conversation_s(prediction, c, shape)
        n = search.num_requests or spec.point_size(0)[0] or 0
        total = n + (spec.warmup_requests if spec.warmup_requests is not None else c)
        seconds = None if per is None else total * per / c
        out.append(PointPlan("", name, f"c{c}", total, seconds))
    return out


def plan_pair(
    name: str,
    server_points: Sequence[str],
    workloads: Mapping[str, WorkloadSpec],
    shapes: Mapping[str, TrafficShape],
    predictions: Sequence[PairPrediction],
    bench: BenchSettings,
    slo: Slo,
    startup_s: float,
    task: TaskShape = TaskShape(),
    probe: ProbeShape = ProbeShape(),
) -> PairPlan:
    """Every point of one pair, timed (see the module docstring)."""
    plan = PairPlan(name, startup_s, server_points=len(server_points))
    first = next((p for p in predictions if p.pair == name and server_points
                  and p.server_point == server_points[0]), None)  # fmt: skip
    plan.task_s = task_s(first, task)
    probed = next((p for p in predictions if p.pair == name
                   and p.server_point == probe.server_point), first)  # fmt: skip
    plan.probe_s = probe_s(probed, probe)
    leaders: dict[str, float] = {}  # the race's leader per workload: its predicted rate
    for label in server_points:
        for workload, spec in workloads.items():
            spec = spec if spec.name else spec.model_copy(update={"name": workload})
            prediction = next(
                (
                    p
                    for p in predictions
                    if (p.pair, p.server_point, p.workload) == (name, label, workload)
                ),
                None,
            )
            shape = shapes.get(workload, TrafficShape())
            if bench.mode == "search":
                points = search_points(spec, bench, slo, prediction, shape)
            else:
                points = []
                for i in range(len(spec.points)):
                    lead = leaders.get(workload) if bench.race else None
                    points.append(
                        grid_point(spec, i, prediction, shape, slo, bench.confidence, lead)
                    )
                    rate = predicted_rate(spec, i, prediction, shape)
                    if rate and predicted_pass(spec, i, prediction, slo):
                        leaders[workload] = max(leaders.get(workload, 0.0), rate)
            for point in points:
                point.server_point = label
                point.workload = workload
                plan.points.append(point)
    return plan


def minutes(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 60:.1f} min"


def render(plans: Sequence[PairPlan]) -> str:
    """A markdown table per pair and the total."""
    lines = [
        "| pair | server points | points | conversations | served task | expected |",
        "|---|---|---|---|---|---|",
    ]
    for plan in plans:
        conversations = sum(p.conversations or 0 for p in plan.points)
        lines.append(
            f"| {plan.pair} | {plan.server_points} | {len(plan.points)} | {conversations} | "
            f"{minutes(plan.task_s) if plan.task_s != 0 else '–'} | {minutes(plan.seconds)} |"
        )
    known = [p.seconds for p in plans if p.seconds is not None]
    total = sum(known)
    unknown = [p.pair for p in plans if p.seconds is None]
    lines.append("")
    head = f"Expected bench time: {minutes(total)}" if known else "Expected bench time: unknown"
    lines.append(
        head
        + (f"{' plus' if known else ':'} {', '.join(unknown)} (no prediction)" if unknown else "")
        + ". Each point at its precision cap (one that meets its target sooner stops sooner), or "
        "where its verdict would stop it if the prediction were the truth (a pass at the first "
        "look, precision.early_pass; a clear miss at the first look that shows it; a point "
        "predicted at most 1/1.5 of an earlier one's throughput where the race stops it: a "
        "closed loop at its first look, an open one at min_requests); requests "
        "timed from each pair's probe (its last bench), or the "
        "roofline where a pair has none, optimistic where engines batch on a CPU "
        "(docs/ESTIMATE.md)."
    )
    return "\n".join(lines)
