"""One row per (server setting, workload, load point): repeats folded, SLO verdict, checks, cost;
and the best row per workload, with the rows it could not be told apart from.

Every number is computed from the load harness's per-point results, which are themselves computed
from raw request records; nothing here reads Locust's statistics.

Intervals: over repeats (two or more), Student t on the repeats' values; with one repeat, the
point's own intervals (order statistics for percentiles, batch means for rates,
Clopper-Pearson for the error rate: see quantbench.load.metrics).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from quantbench.decision.compare import EXACT_DF, LogEstimate, critical, welch_df
from quantbench.decision.cost import cost_per_million_tokens
from quantbench.decision.rules import (
    Candidate,
    Confirmed,
    Decision,
    DecisionSettings,
    QualityContrast,
    decide,
)
from quantbench.load.gpu_window import fold_windows
from quantbench.load.metrics import PointResult
from quantbench.precision import Figure, t_interval

Reader = Callable[[PointResult], float | None]
OwnInterval = Callable[[PointResult], Figure | None]


def _pct(metric: str, key: str) -> tuple[Reader, OwnInterval]:
    def value(p: PointResult) -> float | None:
        stats = getattr(p, metric)
        return None if stats is None else stats.percentiles_ms.get(key)

    def interval(p: PointResult) -> Figure | None:
        stats = getattr(p, metric)
        return None if stats is None else stats.intervals_ms.get(key)

    return value, interval


# Headline figures: name -> (how to read it from one PointResult, its own interval there).
HEADLINE: dict[str, tuple[Reader, OwnInterval]] = {
    "output_throughput": (lambda p: p.output_throughput, lambda p: p.output_throughput_interval),
    "good_output_throughput": (
        lambda p: p.good_output_throughput,
        lambda p: p.good_output_throughput_interval,
    ),
    "request_throughput": (
        lambda p: p.request_throughput,
        lambda p: p.request_throughput_interval,
    ),
    "goodput": (lambda p: p.goodput, lambda p: p.goodput_interval),
    "error_rate": (lambda p: p.error_rate, lambda p: p.error_rate_interval),
    **{
        f"{m}_{k}_ms": _pct(m, k)
        for m, keys in (
            ("ttft", ("p50", "p90", "p99")),
            ("tpot", ("p50", "p90", "p99")),
            ("itl", ("p50", "p99")),
            ("e2e", ("p50", "p99")),
        )
        for k in keys
    },
}


def _merge_counts(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for c in counts:
        for key, n in c.items():
            merged[key] = merged.get(key, 0) + n
    return merged


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


# The rates: each repeat's own interval is batch means over its window, and the run-to-run spread
# of a rate is what report.drift states (docs/BENCH.md, "How the decision is made").
RATES = ("output_throughput", "good_output_throughput", "request_throughput", "goodput")


def pooled_repeats(
    results: Sequence[PointResult], name: str, confidence: float, drift: float
) -> Figure | None:
    """A rate's mean over repeats with an interval that pools the repeats' own intervals with
    the spread between them: the variance of one repeat is the larger of its between-repeat
    estimate (R - 1 degrees of freedom) and the repeats' own error plus one run's spread (half
    ``drift``'s variance, report.drift), on the log scale. Two repeats alone give a t interval
    with one degree of freedom (a median half-width of 22.6 % where each repeat's own was 5.4 %;
    pooled, 5.5 %, covering 97.5 %: tests/bench/test_units.py); with the spread stated, the
    between-repeat estimate only widens it where the repeats differ more than that. None where a
    repeat has no positive interval of its own (then t over the repeats)."""
    read, own = HEADLINE[name]
    values: list[float] = []
    ests: list[LogEstimate] = []
    for r in results:
        value, fig = read(r), own(r)
        est = LogEstimate.of(fig.model_copy(update={"value": value})) if fig and value else None
        if value is None or est is None:
            return None
        values.append(float(value))
        ests.append(est)
    n = len(ests)
    mean = sum(e.log for e in ests) / n
    between = sum((e.log - mean) ** 2 for e in ests) / (n - 1)
    modelled = sum(e.se**2 for e in ests) / n + drift**2 / 2
    if between > modelled:
        df, var, how = float(n - 1), between, f"t over {n} repeats"
    else:
        own_df = welch_df([(e.se**2, e.df) for e in ests])
        df = welch_df([(modelled - drift**2 / 2, own_df), (drift**2 / 2, float(EXACT_DF))])
        var = modelled
        how = (
            f"{n} repeats pooled: their own intervals and a run-to-run spread of "
            f"{drift / math.sqrt(2):.1%} (report.drift)"
        )
    value = sum(values) / n
    half = critical(confidence, df) * math.sqrt(var / n)
    return Figure(value=value, low=value * math.exp(-half), high=value * math.exp(half),
                  confidence=confidence, n=n, method=how)  # fmt: skip


def fold_repeats(
    results: Sequence[PointResult],
    *,
    workload: str,
    confidence: float,
    price_per_hour: float,
    possible_cache_share: float | None = None,
    drift: float | None = None,
) -> dict[str, Any]:
    """Fold the repeats of one point into a row: figures with intervals, verdict, checks.
    ``drift`` (report.drift): the rates' intervals over repeats pool the repeats' own intervals
    with it (:func:`pooled_repeats`); None: t over the repeats."""
    row: dict[str, Any] = {"workload": workload}
    intervals: dict[str, dict[str, Any]] = {}
    too_few: list[str] = []
    for name, (read, own) in HEADLINE.items():
        values = _finite([read(r) for r in results])
        row[name] = sum(values) / len(values) if values else None
        pooled = (
            pooled_repeats(results, name, confidence, drift)
            if drift is not None and name in RATES and len(values) == len(results) >= 2
            else None
        )
        if pooled is not None:
            intervals[name] = pooled.model_dump()
        elif len(values) >= 2:
            iv = t_interval(values, confidence, method=f"t over {len(values)} repeats")
            if iv is not None:
                # every headline figure is a rate, a share or a latency: never below 0, and a
                # share never above 1 (a t interval over two repeats can reach past both)
                d = iv.to_dict()
                d["low"] = max(0.0, float(d["low"]))
                if name == "error_rate":
                    d["high"] = min(1.0, float(d["high"]))
                intervals[name] = d
        elif len(results) == 1:
            fig = own(results[0])
            if fig is not None:
                intervals[name] = fig.model_dump()
        if name.endswith("_ms"):
            metric, key = name.split("_")[0], name.split("_")[1]
            if any(
                getattr(r, metric) is not None and key in getattr(r, metric).too_few
                for r in results
            ):
                too_few.append(name)
    row["intervals"] = intervals
    row["too_few"] = too_few
    row["repeats"] = len(results)
    for count in ("requests", "completed", "failed", "incomplete", "unsent", "not_served"):
        row[count] = sum(getattr(r, count) for r in results)
    row["errors"] = _merge_counts([r.errors for r in results])
    verdicts = [r.slo_verdict for r in results]
    if all(v is None for v in verdicts):
        row.update(slo_verdict=None, slo_passed=None, slo_reasons=[])
    else:
        order = {"fail": 0, "undecided": 1, "pass": 2}
        worst = min(results, key=lambda r: order.get(r.slo_verdict or "fail", 0))
        passed = sum(1 for v in verdicts if v == "pass")
        # A point meets its SLOs only if every repeat does: noise must not flatter it.
        row["slo_verdict"] = worst.slo_verdict
        row["slo_passed"] = passed == len(results)
        row["slo_passes"] = f"{passed}/{len(results)}"
        row["slo_reasons"] = [c.reason for c in worst.slo]
    loads = [r.load for r in results]
    lag_p95 = [r.load.arrival_lag.percentiles_ms.get("p95") for r in results if r.load.arrival_lag]
    row["load"] = {
        "offered": loads[0].offered if loads else None,
        "mean_in_flight": sum(x.mean_in_flight for x in loads) / len(loads) if loads else None,
        "peak_in_flight": max((x.peak_in_flight for x in loads), default=None),
        "achieved_rate": (
            sum(rates) / len(rates)
            if (rates := [x.achieved_rate for x in loads if x.achieved_rate is not None])
            else None
        ),
        "arrival_lag_p95_ms": max(_finite(lag_p95), default=None),
        "reached": all(x.reached for x in loads),
        "note": "; ".join(sorted({x.note for x in loads if x.note})),
    }
    row["lengths_ok"] = all(r.lengths.ok for r in results)
    short = [r.lengths for r in results if not r.lengths.ok]
    row["length_note"] = (
        f"{sum(x.mismatched for x in short)} requests delivered another length than asked "
        f"({sum(x.delivered_tokens for x in short)} of "
        f"{sum(x.requested_tokens for x in short)} tokens)"
        if short
        else ""
    )
    row["harness_ok"] = not any(r.harness.client_bound for r in results)
    row["harness_note"] = "; ".join(sorted({r.harness.note for r in results if r.harness.note}))
    served = [r.cache.served_share for r in results if r.cache.served_share is not None]
    row["cache"] = {
        "possible_share": possible_cache_share,
        "served_share": sum(served) / len(served) if served else None,
    }
    specs = [r.speculation for r in results if r.speculation is not None]
    proposed = sum(s.drafted for s in specs)
    row["draft_acceptance"] = sum(s.accepted for s in specs) / proposed if proposed else None
    row["stop_reason"] = "; ".join(sorted({r.stop_reason for r in results if r.stop_reason}))
    gpu = fold_windows([r.gpu for r in results])
    if gpu is not None:  # no key at all without a GPU: a CPU row is written as it always was
        row["gpu"] = gpu.model_dump()
    tps = row["output_throughput"] or 0.0
    row["cost_per_million_tokens"] = cost_per_million_tokens(price_per_hour, tps)
    row["error"] = None
    return row


def checks(row: dict[str, Any], served_mismatch: str | None = None) -> dict[str, Any]:
    """Set ``rankable`` and ``flags``: every reason this row may not be recommended."""
    flags: list[str] = []
    if row.get("error"):
        flags.append(f"no measurement: {row['error']}")
    if not row.get("completed"):
        flags.append("no request completed")
    verdict = row.get("slo_verdict")
    if row.get("error"):
        pass  # not measured: the SLO verdict says nothing more
    elif verdict == "fail":
        flags.append("misses its SLO")
    elif verdict == "undecided":
        flags.append("SLO undecided: an interval straddles a limit, or too few requests")
    load = row.get("load") or {}
    if load and not load.get("reached", True):
        flags.append(f"did not run the load it claims ({load.get('note') or 'below its load'})")
    if not row.get("lengths_ok", True):
        flags.append(
            "delivered other lengths than asked: never ranked against the others ("
            + (row.get("length_note") or "")
            + ")"
        )
    if not row.get("harness_ok", True):
        flags.append(f"the load generator was the bottleneck ({row.get('harness_note')})")
    if served_mismatch:
        flags.append(f"serves something else than was evaluated: {served_mismatch}")
    row["flags"] = flags
    row["rankable"] = not flags
    return row


def failed_row(reason: str, workload: str) -> dict[str, Any]:
    """A point that produced no measurement (the server never came up, or died before it)."""
    row: dict[str, Any] = dict.fromkeys(HEADLINE)
    row.update(
        workload=workload,
        intervals={},
        too_few=[],
        repeats=0,
        requests=0,
        completed=0,
        failed=0,
        incomplete=0,
        unsent=0,
        not_served=0,
        errors={reason: 1},
        slo_verdict="fail",
        slo_passed=False,
        slo_reasons=[reason],
        cost_per_million_tokens=None,
        error=reason,
    )
    return checks(row)


def rank_metric(rank_by_goodput: bool) -> str:
    """What the best configuration maximises: output tokens per second of requests that met
    every per-request SLO when there are such SLOs, else all output tokens per second.

    Requests per second would favour whatever ends its answers sooner, and 'tokens/s x goodput /
    requests/s' assumed the good requests have average length (under an E2E limit the good ones
    are the short ones): the good tokens themselves are counted instead.
    """
    return "good_output_throughput" if rank_by_goodput else "output_throughput"


def metric_bounds(row: dict[str, Any], metric: str) -> tuple[float, float]:
    """(low, high) of a row's figure: its interval, or the value itself when it has none."""
    value = float(row[metric])
    iv = (row.get("intervals") or {}).get(metric)
    if iv is None:
        return value, value
    return float(iv["low"]), float(iv["high"])


RowFigure = Callable[[dict[str, Any]], "Figure | float | None"]


def row_figure(row: dict[str, Any], metric: str) -> Figure | None:
    """A row's figure with its interval (a value without one: low = high = value)."""
    value = row.get(metric)
    if value is None:
        return None
    iv = (row.get("intervals") or {}).get(metric)
    if iv is None:
        return Figure(value=float(value), low=float(value), high=float(value), confidence=0.95,
                      n=1, method="value")  # fmt: skip
    data = iv if isinstance(iv, dict) else iv.model_dump()
    return Figure.model_validate({**data, "value": float(value)})


def _as_figure(found: Figure | float | None) -> Figure | None:
    if found is None or isinstance(found, Figure):
        return found
    value = float(found)
    if not math.isfinite(value):
        return None
    return Figure(value=value, low=value, high=value, confidence=0.95, n=1, method="value")


def row_key(row: dict[str, Any], index: int) -> str:
    """A key unique among the rows of one decision."""
    if "_index" in row:
        return f"#{row['_index']}"
    parts = [row.get(k) for k in ("pair", "server_point", "workload", "load_point")]
    return "/".join(str(p) for p in parts if p is not None) + f"#{index}"


def _label(row: dict[str, Any]) -> str:
    return " · ".join(str(row[k]) for k in ("pair", "server_point", "load_point") if row.get(k))


def candidates(
    rows: Sequence[dict[str, Any]],
    metric: str,
    memory: Callable[[dict[str, Any]], float | None] = lambda r: None,
    quality: RowFigure | None = None,
    key: Callable[[dict[str, Any]], str] | None = None,
    label: Callable[[dict[str, Any]], str] | None = None,
) -> tuple[list[Candidate], dict[str, dict[str, Any]]]:
    """The rankable rows as the decision's candidates, and key -> row."""
    out, by_key = [], {}
    for i, r in enumerate(rows):
        fig = row_figure(r, metric)
        if not r.get("rankable") or fig is None:
            continue
        k = key(r) if key is not None else row_key(r, i)
        by_key[k] = r
        out.append(
            Candidate(
                key=k,
                label=(label(r) if label is not None else _label(r)) or k,
                pair=str(r.get("pair", "")),
                variant=str(r.get("variant", r.get("pair", ""))),
                engine=str(r.get("engine", "")),
                figure=fig,
                quality=_as_figure(quality(r)) if quality is not None else None,
                memory_bytes=memory(r),
                latency=row_figure(r, "e2e_p50_ms"),
            )
        )
    return out, by_key


def decide_rows(
    rows: Sequence[dict[str, Any]],
    rank_by_goodput: bool,
    memory: Callable[[dict[str, Any]], float | None] = lambda r: None,
    quality: RowFigure | None = None,
    settings: DecisionSettings | None = None,
    confirmed: Confirmed | None = None,
    quality_contrast: QualityContrast | None = None,
    key: Callable[[dict[str, Any]], str] | None = None,
    label: Callable[[dict[str, Any]], str] | None = None,
) -> tuple[Decision, dict[str, dict[str, Any]]]:
    """The decision (quantbench.decision.rules) over bench rows, and key -> row."""
    settings = decision_settings(settings, rank_by_goodput)
    found, by_key = candidates(rows, rank_metric(rank_by_goodput), memory, quality, key, label)
    return decide(found, settings, confirmed, quality_contrast), by_key


def decision_settings(settings: DecisionSettings | None, rank_by_goodput: bool) -> DecisionSettings:
    """The settings, with the ranked figure's name for the decision's words."""
    metric = rank_metric(rank_by_goodput)
    return replace(settings or DecisionSettings(), metric_label=metric.replace("_", " "))


def pick_best(
    rows: Sequence[dict[str, Any]],
    rank_by_goodput: bool,
    memory: Callable[[dict[str, Any]], float | None] = lambda r: None,
    quality: RowFigure | None = None,
    settings: DecisionSettings | None = None,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str]:
    """(the row to deploy, the rows it cannot be separated from, the rule that decided).

    The decision of :mod:`quantbench.decision.rules`: the highest ranked figure among rankable
    rows, compared with every other through the interval on their ratio (never by overlap);
    only rows equivalent within the margin go to the tie-breaks (quality, given by
    ``quality(row)``: a figure with its interval or a value, lower is better, across variants
    only; then memory ``memory(row)``; then E2E p50), each deciding only beyond its noise and
    materiality. The rows returned beside the winner are those equivalent to it or not yet
    separable from it."""
    decision, by_key = decide_rows(rows, rank_by_goodput, memory, quality, settings)
    if decision.winner is None:
        return None, [], decision.rule
    best = by_key[decision.winner.key]
    others = [
        by_key[c.key]
        for c in [*([decision.leader] if decision.leader else []), *decision.equivalent,
                  *decision.unresolved]
        if c.key != decision.winner.key
    ]  # fmt: skip
    return best, others, decision.rule
