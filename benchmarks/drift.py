"""Drift on this machine: one configuration measured again and again, how far its runs wander
beyond their own intervals.

Not a test and not a stage. Starts one bench pair's server (its default setting, or
``--server-point``) once, runs one of its workload's load points ``--runs`` times in a row (each
run a fresh repeat: its own prompts and seed, the engine's prefix cache emptied), and prints each
run's ranked figure with its interval, then:

* the spread of the runs beyond their own errors (tau, DerSimonian-Laird over the runs' log
  figures: the drift a single run's interval does not hold);
* the drift between two runs beyond their errors (sqrt(2) x tau: what ``report.drift`` stands
  for), the raw spread of the log ratio of consecutive runs, and the share of consecutive pairs
  whose ratio's interval, from their own intervals alone, excludes 1 (they would be called
  different).

    python benchmarks/drift.py gguf-q4_k_m-llamacpp --workload chat --point c4 --runs 10

It reads what `make repro` built (models/variants, reports/workloads) and params.yaml; it uses
the bench stage's own code (quantbench.bench.remeasure). docs/BENCH.md's drift figure was
measured this way.
"""

from __future__ import annotations

import argparse
import itertools
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from quantbench.bench.job import pair_job
from quantbench.bench.remeasure import RowServers
from quantbench.config import load_config
from quantbench.decision.compare import LogEstimate, ratio
from quantbench.decision.rows import rank_metric


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("pair")
    parser.add_argument("--workload", default=None, help="default: the first workload")
    parser.add_argument("--point", default=None, help="a load point label; default: the last")
    parser.add_argument("--server-point", default=None, help="default: the first of the sweep")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    job = pair_job(load_config(args.params), args.pair)
    workload = args.workload or next(iter(job.workloads))
    spec = job.workloads[workload]
    labels = [spec.point_label(i) for i in range(len(spec.points))]
    point = args.point or labels[-1]
    server_point = args.server_point or job.settings.sweep_points()[0][0]
    metric = rank_metric(bool(job.slo_for(workload).per_request))
    key = f"{args.pair}/{server_point}/{workload}/{point}"
    ests: list[LogEstimate] = []
    with tempfile.TemporaryDirectory(prefix="qb-drift-") as tmp:
        servers = RowServers({args.pair: job}, Path(tmp))
        started = time.monotonic()
        try:
            for run in range(args.runs):
                got = servers.measure(key, 200 + run, metric, Path(tmp) / f"run{run}")
                fig = got.figure
                est = LogEstimate.of(fig) if fig is not None else None
                shown = f"{fig.value:.1f} [{fig.low:.1f}, {fig.high:.1f}]" if fig else "none"
                print(f"run {run + 1:2d} at {time.monotonic() - started:6.0f} s: {shown} "
                      f"({got.wall_s:.0f} s)", flush=True)  # fmt: skip
                if est is not None:
                    ests.append(est)
        finally:
            servers.close()
    if len(ests) < 3:
        print("too few runs with a figure")
        return
    logs = np.array([e.log for e in ests])
    ses = np.array([e.se for e in ests])
    w = 1 / ses**2
    mean = float((w * logs).sum() / w.sum())
    q = float((w * (logs - mean) ** 2).sum())
    c = float(w.sum() - (w**2).sum() / w.sum())
    tau = math.sqrt(max(0.0, (q - (len(ests) - 1)) / c))
    diffs = np.diff(logs)
    apart = [ratio(b, a).interval(0.95) for a, b in itertools.pairwise(ests)]
    called_different = sum(1 for lo, hi in apart if hi < 1 or lo > 1)
    print()
    print(f"{key}, {metric}, {len(ests)} runs:")
    print(f"- the runs' own standard error (log): median {float(np.median(ses)):.3f}")
    print(f"- spread of the runs beyond their own errors (tau): {tau:.1%}")
    print(f"- spread of the log ratio of consecutive runs, their errors included: "
          f"{float(np.std(diffs, ddof=1)):.1%}")  # fmt: skip
    print(f"- drift between two runs beyond their errors (sqrt(2) x tau, what report.drift "
          f"stands for): {math.sqrt(2) * tau:.1%}")  # fmt: skip
    print(f"- consecutive pairs their own intervals call different: {called_different} of "
          f"{len(apart)}")  # fmt: skip


if __name__ == "__main__":
    main()
