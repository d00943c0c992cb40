"""What DVC compares across experiments: a flat metrics file and CSV data for `dvc plots`.

``report_metrics.json`` (``dvc metrics show/diff``, ``dvc exp show``; its schema is
:class:`quantbench.schemas.report_metrics.ReportMetrics`): the recommendation per workload (and
per extra profile, ``<workload>:<profile>``), each pair's rank and figures per workload, and
counts. ``plots/points.csv`` has every measured row (a ``workload`` column tells
the workloads apart), ``plots/pairs.csv`` one row per workload and pair at its best point; the
plot definitions in dvc.yaml draw from them.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from quantbench.decision.profiles import Profile
from quantbench.outputs import ReportInputs, clean_json
from quantbench.report.tables import (
    METRICS,
    POINT_FIGURES,
    PairLine,
    PointRow,
    RankingRow,
    pair_figures,
)
from quantbench.schemas import metrics as registry
from quantbench.schemas.report_metrics import ReportMetrics


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


# What `dvc metrics show` gets per pair and workload: few enough columns for `dvc exp show`.
BRIEF = ("rank", "ranked", *registry.BRIEF)


def pair_record(
    line: PairLine, inputs: ReportInputs, rank: int | None = None, brief: bool = False
) -> dict[str, Any]:
    row = line.row
    measured = row is not None and row.measured
    out: dict[str, Any] = {
        "rank": rank,
        "ranked": bool(line.passes and measured),
        "slo_verdict": row.slo_verdict if measured and row else None,
        "server_point": row.server_point if row else None,
        "load_point": row.load_point if row else None,
    }
    out.update(pair_figures(line, inputs, registry.PAIR))
    if brief:
        out = {k: out[k] for k in BRIEF}
    return {k: _rounded(v) for k, v in out.items()}


def _ranks(ranking: list[RankingRow]) -> dict[tuple[str, str], int | None]:
    return {(r.pair, w): c.rank for r in ranking for w, c in r.cells.items()}


def metrics_json(
    inputs: ReportInputs,
    profiles: list[Profile],
    lines_by_profile: dict[str, list[PairLine]],
    points: list[PointRow],
    ranking: list[RankingRow],
) -> dict[str, Any]:
    ranks = _ranks(ranking)
    recommended: dict[str, Any] = {}
    for profile in profiles:
        best = profile.best
        if best is None:
            recommended[profile.key] = {"pair": None, "found": False}
            continue
        line = next(x for x in lines_by_profile[profile.key] if x.pair == best.pair)
        metric = profile.ranked_by
        iv = best.row.intervals.get(metric)
        recommended[profile.key] = {
            "pair": best.pair,
            "found": True,
            "ties": len(profile.ties),
            "ranked_by": metric,
            "ranked_low": iv.low if iv else None,
            "ranked_high": iv.high if iv else None,
            **pair_record(line, inputs, ranks.get((best.pair, profile.workload))),
        }
    pairs: dict[str, dict[str, Any]] = {name: {} for name in sorted(inputs.pairs)}
    for profile in profiles:
        if not profile.is_default:
            continue
        for line in lines_by_profile.get(profile.key, []):
            rank = ranks.get((line.pair, profile.workload))
            pairs[line.pair][profile.workload] = pair_record(line, inputs, rank, brief=True)
    rows = [r for p in profiles if p.is_default for r in p.rows]
    counts = {
        "pairs": len(inputs.pairs),
        "workloads": sum(1 for p in profiles if p.is_default),
        "rows": len(rows),
        "rows_measured": sum(1 for r in rows if r.row.measured),
        "rows_ranked": sum(1 for r in rows if r.rankable),
        "rows_flagged": sum(1 for r in rows if r.row.measured and not r.rankable),
        "points": len(points),
    }
    # written through its schema: a figure that drifts from it fails the report stage
    metrics = ReportMetrics.model_validate(
        clean_json({"recommended": recommended, "pairs": pairs, "counts": counts})
    )
    return clean_json(metrics.model_dump(mode="json"))


POINT_COLUMNS = (
    "workload",
    "pair",
    "variant",
    "engine",
    "server_point",
    "load_point",
    "load_kind",
    "load",
    "slo_verdict",
    "ranked",
    "flags",
    *(name for name in POINT_FIGURES if METRICS[name].source != "point"),  # the load: above
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
                "workload": p.workload,
                "pair": p.pair,
                "variant": p.variant,
                "engine": p.engine,
                "server_point": p.server_point,
                "load_point": p.load_point,
                "load_kind": p.load_kind,
                "slo_verdict": p.slo_verdict,
                "ranked": p.passed is not False,
                "flags": "; ".join(p.flags),
                **p.values,
            }
        )
    return _csv(POINT_COLUMNS, rows)


PAIR_COLUMNS = (
    "workload",
    "pair",
    "variant",
    "engine",
    "rank",
    "ranked",
    "slo_verdict",
    "server_point",
    "load_point",
    *registry.PAIR,
)


def pairs_csv(
    profiles: list[Profile],
    lines_by_profile: dict[str, list[PairLine]],
    inputs: ReportInputs,
    ranking: list[RankingRow],
) -> str:
    ranks = _ranks(ranking)
    rows = [
        {
            "workload": p.workload,
            "pair": x.pair,
            "variant": x.variant,
            "engine": x.engine,
            **pair_record(x, inputs, ranks.get((x.pair, p.workload))),
        }
        for p in profiles
        if p.is_default
        for x in lines_by_profile.get(p.key, [])
    ]
    return _csv(PAIR_COLUMNS, rows)
