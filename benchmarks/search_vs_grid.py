"""Search against grid, on this machine: the same settings x loads, the runs each takes, the winner.

Not a test and not a stage. Over one pair's server settings (a sweep) and closed-loop loads
1..max, runs the full grid (every setting at every load) and the SLO-edge search (per setting, the
noise-aware edge search of `bench.mode: search`), both through the bench stage's own code
(`quantbench.bench.run.run_pair`) against real servers, and prints a markdown table: runs, wall
time, the winner each picks by the ranked figure, and whether they agree (the same row, or a tie
within the two winners' intervals).

    python benchmarks/search_vs_grid.py gguf-q4_k_m-llamacpp --sweep parallel=1,4 --max 16

`--modes search,unraced` compares the search with and without the race across settings
(`bench.race`) and skips the grid; `--modes search,unraced,grid` runs all three.

It reads what `make repro` built (models/variants, reports/workloads, reports/quality) and the
params of the pair, its engine and the workload (`--workload`, default the first). The table of
docs/BENCH.md ("Search against grid") was measured this way.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from quantbench.bench.job import JobPaths, pair_job
from quantbench.bench.run import PairJob, run_pair
from quantbench.bench.spec import BenchSettings
from quantbench.config import load_config
from quantbench.params import overlay
from quantbench.schemas.bench import BenchRow, PairSummary
from quantbench.workloads.spec import ClosedLoop


def parse_sweep(text: str) -> dict[str, list[Any]]:
    """``parallel=1,4`` -> {"parallel": [1, 4]} (integers where they parse)."""
    key, _, values = text.partition("=")

    def value(v: str) -> Any:
        return int(v) if v.lstrip("-").isdigit() else v

    return {key: [value(v) for v in values.split(",") if v]}


def job_for(args: argparse.Namespace, mode: str) -> tuple[PairJob, str]:
    """The pair as its bench stage resolves it (quantbench.bench.job.pair_job), on --sweep's
    settings and one workload at loads 1..--max, in ``mode``."""
    job = pair_job(load_config(args.params), args.pair, JobPaths())
    settings = overlay(job.settings, {"sweep": parse_sweep(args.sweep)}, "--sweep")
    name = args.workload or next(iter(job.workloads))
    loads = [ClosedLoop(concurrency=c) for c in range(1, args.max + 1)]
    search = {"kind": "concurrency", "start": 1, "max": args.max, "confirm": args.confirm}
    bench = BenchSettings.model_validate(
        {
            **job.bench.model_dump(),
            "mode": "grid" if mode == "grid" else "search",
            "race": mode == "search",  # the grid is the full grid: every point run
            "search": search,
            "pairs": {},
        }
    )
    return replace(
        job,
        settings=settings,
        workloads={name: job.workloads[name].model_copy(update={"load": loads})},
        traffic={name: job.traffic[name]},
        bench=bench,
    ), name


def winner_text(row: BenchRow | None, metric: str) -> str:
    if row is None:
        return "none met the SLO"
    value = row.metric(metric)
    iv = row.intervals.get(metric)
    span = f" [{iv.low:.1f}, {iv.high:.1f}]" if iv is not None else ""
    return f"{row.server_point} @ {row.load_point}: {value:.1f}{span}"


def agree(a: BenchRow | None, b: BenchRow | None, metric: str) -> str:
    if a is None or b is None:
        return "yes" if a is b else "no"
    if (a.server_point, a.load_point.split(".")[0]) == (b.server_point, b.load_point):
        return "same row"
    ia, ib = a.intervals.get(metric), b.intervals.get(metric)
    if ia is not None and ib is not None and ia.low <= ib.high and ib.low <= ia.high:
        return "tie (intervals overlap)"
    return "no"


def edges_text(summary: PairSummary) -> str:
    """Each setting's edge: the search's (with its interval, and why it stopped early), or the
    highest rankable load of a grid."""
    if summary.mode == "grid":
        passing: dict[str, int] = {}
        for r in summary.rows:
            if r.rankable and r.shape:
                c = int(r.shape["concurrency"])
                passing[r.server_point] = max(passing.get(r.server_point, 0), c)
        return "; ".join(f"{k}: {v}" for k, v in sorted(passing.items()))
    return "; ".join(
        f"{s.server_point}: {q.edge if q.edge is None else f'{q.edge:g}'}"
        + (f" [{q.interval[0]:g}, {q.interval[1]:g}]" if q.interval else "")
        + (f" (dropped after {q.runs} run(s))" if q.dropped else "")
        for s in summary.servers
        for q in s.search.values()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pair", help="a bench.pairs entry (its variant must be built)")
    parser.add_argument("--sweep", required=True, help="setting=v1,v2 (e.g. parallel=1,4)")
    parser.add_argument("--max", type=int, default=16, help="loads 1..max (default 16)")
    parser.add_argument("--confirm", type=int, default=1, help="search.confirm (default 1)")
    parser.add_argument("--workload", help="default: the first of workloads:")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--modes",
        default="search,grid",
        help="of search, unraced (bench.race off), grid (full, unraced)",
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - {"search", "unraced", "grid"}
    if unknown or "search" not in modes or len(modes) < 2:
        parser.error("--modes: search and at least one of unraced, grid")
    results: dict[str, tuple[PairSummary, float, str]] = {}
    for mode in modes:
        job, workload = job_for(args, mode)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"qb-{mode}-") as out:
            summary = run_pair(job, Path(out))
        results[mode] = (summary, time.monotonic() - started, workload)
        print(f"{mode}: {len(summary.rows)} runs in {results[mode][1]:.0f} s", file=sys.stderr)
    search, _, workload = results["search"]
    metric = search.ranked_by
    print(f"| mode | runs | wall s | winner ({metric}, tok/s) | edges per setting |")
    print("|---|---|---|---|---|")
    for mode, (summary, seconds, _) in results.items():
        print(
            f"| {mode} | {len(summary.rows)} | {seconds:.0f} | "
            f"{winner_text(summary.best.get(workload), metric)} | {edges_text(summary)} |"
        )
    print()
    s_best = search.best.get(workload)
    for mode, (summary, _, _) in results.items():
        if mode == "search":
            continue
        print(
            f"search/{mode} runs: {len(search.rows)}/{len(summary.rows)} = "
            f"{len(search.rows) / len(summary.rows):.0%}; same winner: "
            f"{agree(s_best, summary.best.get(workload), metric)}."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
