"""What DVC compares across experiments: a flat metrics file and CSV data for `dvc plots`.

``report_metrics.json`` (``dvc metrics show/diff``, ``dvc exp show``): the recommendation per
profile and each pair's figures at its best point. ``plots/points.csv`` has every measured point,
``plots/pairs.csv`` one row per pair; the plot definitions in dvc.yaml draw from them.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from quantbench.report.inputs import ReportInputs, clean_json
from quantbench.report.profiles import Profile
from quantbench.report.tables import (
    MIB,
    QUALITY_METRICS,
    ROW_METRICS,
    PairLine,
    PointRow,
    quality_value,
)

PAIR_METRICS = (
    "output_throughput",
    "goodput",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "e2e_p99_ms",
    "cost_per_million_tokens",
)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


# What `dvc metrics show` gets per pair: few enough columns for `dvc exp show` to stay readable.
BRIEF = (
    "slo_passed",
    "output_throughput",
    "goodput",
    "ttft_p99_ms",
    "tpot_p99_ms",
    "cost_per_million_tokens",
    "peak_rss_mib",
    "perplexity_ratio",
    "heldout_accuracy",
)


def pair_record(line: PairLine, inputs: ReportInputs, brief: bool = False) -> dict[str, Any]:
    row = line.row
    quality = inputs.quality.get(line.variant)
    out: dict[str, Any] = {
        "slo_passed": line.passes if row is not None and row.measured else False,
        "server_point": row.server_point if row else None,
        "load_point": row.load_point if row else None,
    }
    for m in PAIR_METRICS:
        out[m] = row.metric(m) if row is not None and row.measured else None
    out["peak_rss_mib"] = line.peak_rss_bytes / MIB if line.peak_rss_bytes else None
    out["size_mib"] = line.size_bytes / MIB if line.size_bytes else None
    for key in QUALITY_METRICS:
        out[key] = quality_value(quality, key)
    if brief:
        out = {k: out[k] for k in BRIEF}
    return {k: _rounded(v) for k, v in out.items()}


def metrics_json(
    inputs: ReportInputs,
    profiles: list[Profile],
    lines_by_profile: dict[str, list[PairLine]],
    points: list[PointRow],
) -> dict[str, Any]:
    recommended: dict[str, Any] = {}
    for profile in profiles:
        best = profile.best
        if best is None:
            recommended[profile.name] = {"pair": None, "found": False}
            continue
        line = next(x for x in lines_by_profile[profile.name] if x.pair == best.pair)
        recommended[profile.name] = {"pair": best.pair, "found": True, **pair_record(line, inputs)}
    default = profiles[0].name if profiles else None
    pairs = {
        line.pair: pair_record(line, inputs, brief=True)
        for line in lines_by_profile.get(default or "", [])
    }
    counts = {
        "pairs": len(inputs.pairs),
        "pairs_meeting_slo": sum(1 for p in pairs.values() if p["slo_passed"]),
        "points": len(points),
        "points_meeting_slo": sum(1 for p in points if p.passed),
    }
    return clean_json({"recommended": recommended, "pairs": pairs, "counts": counts})


POINT_COLUMNS = (
    "pair",
    "variant",
    "engine",
    "server_point",
    "load_point",
    "load_kind",
    "load",
    "slo_passed",
    *ROW_METRICS,
    "peak_rss_mib",
    "size_mib",
    *QUALITY_METRICS,
)


def _csv(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: "" if row.get(c) is None else _rounded(row.get(c)) for c in columns})
    return buf.getvalue()


def points_csv(points: list[PointRow]) -> str:
    rows = []
    for p in points:
        rows.append(
            {
                "pair": p.pair,
                "variant": p.variant,
                "engine": p.engine,
                "server_point": p.server_point,
                "load_point": p.load_point,
                "load_kind": p.load_kind,
                "slo_passed": p.passed,
                **p.values,
            }
        )
    return _csv(POINT_COLUMNS, rows)


PAIR_COLUMNS = (
    "pair",
    "variant",
    "engine",
    "server_point",
    "load_point",
    "slo_passed",
    *PAIR_METRICS,
    "peak_rss_mib",
    "size_mib",
    *QUALITY_METRICS,
)


def pairs_csv(lines: list[PairLine], inputs: ReportInputs) -> str:
    rows = [
        {"pair": x.pair, "variant": x.variant, "engine": x.engine, **pair_record(x, inputs)}
        for x in lines
    ]
    return _csv(PAIR_COLUMNS, rows)
