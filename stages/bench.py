"""DVC stage `bench@<variant>-<engine>`: benchmark one variant on one engine into reports/bench/.

Starts the engine once per server-setting point of its sweep, checks its answers against the
variant's offline reference, runs every workload's load points (or the SLO-edge search) against
it, stops it, and writes the records, a summary per point, the server's log and memory, and the
best configuration per workload. On the setting that batches most it first probes the server for
the estimate (probe.json; `estimate.probe`, off with the pair's `probe: false`). Finished points are kept in .quantbench/partial/ until the stage
completes, so an interrupted run resumes where it stopped (quantbench.bench.stage).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.bench.job import JobPaths
from quantbench.bench.stage import bench_stage
from quantbench.config import load_config
from quantbench.errors import run_main
from quantbench.progress import setup_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--pair", required=True, help="a key of bench.pairs, e.g. bf16-transformers"
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--variants", type=Path, default=Path("models/variants"))
    parser.add_argument("--workloads", type=Path, default=Path("reports/workloads"))
    parser.add_argument("--quality", type=Path, default=Path("reports/quality"))
    parser.add_argument("--env", type=Path, default=Path("reports/env.json"))
    parser.add_argument("--out", type=Path, default=None, help="default: reports/bench/<pair>")
    args = parser.parse_args()
    setup_logging()
    config = load_config(args.params)
    paths = JobPaths(args.variants, args.workloads, args.quality)
    out = args.out or Path("reports/bench") / args.pair
    summary = bench_stage(args.pair, config, paths, args.env, out)
    if summary.not_served:
        print(f"{args.pair}: no server started: {summary.not_served}")
        return
    for workload, best in summary.best.items():
        print(
            f"{args.pair} [{workload}]: best {best.server_point} / {best.load_point} "
            f"({summary.decided_by.get(workload, '')})"
            if best
            else f"{args.pair} [{workload}]: no configuration met the SLO and every check"
        )


if __name__ == "__main__":
    run_main(main)
