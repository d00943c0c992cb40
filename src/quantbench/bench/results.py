"""One row per (server setting, load point): repeats folded into estimates, SLO verdict, cost.

Every number is computed from the load harness's per-point results, which are themselves computed
from raw request records; nothing here reads Locust's statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quantbench.bench.cost import cost_per_million_tokens
from quantbench.bench.stats import estimate
from quantbench.load.metrics import PointResult

# Headline metrics: name -> how to read it from one PointResult.
HEADLINE: dict[str, Any] = {
    "output_throughput": lambda p: p.output_throughput,
    "request_throughput": lambda p: p.request_throughput,
    "goodput": lambda p: p.goodput,
    "error_rate": lambda p: p.error_rate,
    "ttft_p50_ms": lambda p: p.ttft.percentiles_ms.get("p50") if p.ttft else None,
    "ttft_p99_ms": lambda p: p.ttft.percentiles_ms.get("p99") if p.ttft else None,
    "tpot_p50_ms": lambda p: p.tpot.percentiles_ms.get("p50") if p.tpot else None,
    "tpot_p99_ms": lambda p: p.tpot.percentiles_ms.get("p99") if p.tpot else None,
    "itl_p50_ms": lambda p: p.itl.percentiles_ms.get("p50") if p.itl else None,
    "itl_p99_ms": lambda p: p.itl.percentiles_ms.get("p99") if p.itl else None,
    "e2e_p50_ms": lambda p: p.e2e.percentiles_ms.get("p50") if p.e2e else None,
    "e2e_p99_ms": lambda p: p.e2e.percentiles_ms.get("p99") if p.e2e else None,
}


def fold_repeats(
    results: Sequence[PointResult],
    *,
    confidence: float,
    price_per_hour: float,
) -> dict[str, Any]:
    """Fold the repeats of one point into a row: means, intervals, SLO verdict, cost, counts."""
    estimates = {
        name: estimate([read(r) for r in results], confidence) for name, read in HEADLINE.items()
    }
    row: dict[str, Any] = {
        name: (est.mean if est is not None else None) for name, est in estimates.items()
    }
    row["intervals"] = {
        n: e.model_dump() for n, e in estimates.items() if e is not None and e.n > 1
    }
    row["repeats"] = len(results)
    row["requests"] = sum(r.requests for r in results)
    row["completed"] = sum(r.completed for r in results)
    row["failed"] = sum(r.failed for r in results)
    row["incomplete"] = sum(r.incomplete for r in results)
    row["errors"] = _merge_counts([r.errors for r in results])
    verdicts = [r.slo_passed for r in results]
    if all(v is None for v in verdicts):
        row["slo_passed"] = None
        row["slo_reasons"] = []
    else:
        passed = sum(1 for v in verdicts if v)
        # A point meets its SLOs only if every repeat does: noise must not flatter it.
        row["slo_passed"] = passed == len(results)
        row["slo_passes"] = f"{passed}/{len(results)}"
        worst = min(results, key=lambda r: sum(1 for c in r.slo if c.passed))
        row["slo_reasons"] = [c.reason for c in worst.slo]
    tps = row["output_throughput"] or 0.0
    row["cost_per_million_tokens"] = cost_per_million_tokens(price_per_hour, tps)
    return row


def failed_row(reason: str) -> dict[str, Any]:
    """A point that produced no measurement (the server never came up, or died before it)."""
    row: dict[str, Any] = dict.fromkeys(HEADLINE)
    row.update(
        intervals={},
        repeats=0,
        requests=0,
        completed=0,
        failed=0,
        incomplete=0,
        errors={reason: 1},
        slo_passed=False,
        slo_reasons=[reason],
        cost_per_million_tokens=None,
        error=reason,
    )
    return row


def _merge_counts(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for c in counts:
        for key, n in c.items():
            merged[key] = merged.get(key, 0) + n
    return merged


def rank_value(row: dict[str, Any], rank_by_goodput: bool) -> float | None:
    """What the best configuration maximises: output tokens per second, counting only requests
    that met every per-request SLO when there are such SLOs (goodput in tokens).

    Goodput in requests/s would favour whatever ends its answers sooner: transformers' continuous
    batching ignores the fixed output length and stops at EOS, and a 4-bit model that rambles less
    would look faster per request without being faster per token.
    """
    tps = row.get("output_throughput")
    if tps is None:
        return None
    if not rank_by_goodput:
        return float(tps)
    good, rps = row.get("goodput"), row.get("request_throughput")
    if good is None or not rps:
        return None
    return float(tps) * float(good) / float(rps)


def pick_best(rows: Sequence[dict[str, Any]], rank_by_goodput: bool) -> dict[str, Any] | None:
    """The row to deploy: among rows meeting every SLO, the most output tokens per second of
    requests that met the per-request SLOs (see rank_value); ties go to the lower p99 E2E."""
    candidates = [
        r
        for r in rows
        if r.get("slo_passed") is not False
        and not r.get("error")
        and r.get("completed")
        and rank_value(r, rank_by_goodput) is not None
    ]
    if not candidates:
        return None
    return max(
        candidates,
        key=lambda r: (rank_value(r, rank_by_goodput), -(r.get("e2e_p99_ms") or 0.0)),
    )
