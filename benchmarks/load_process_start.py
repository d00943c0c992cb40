"""What each load point's process costs to start: forked from a template against started anew.

Not a test. Runs one session of N tiny points (N short requests each, at 1 to N streams, against a
zero-delay fake server)
twice: with the template (`quantbench.load.forkserver`, the default) and with
`QUANTBENCH_LOAD_FORK=0` (a fresh `python -m quantbench.load.runner` per point), and prints the
session's wall time and the CPU time of its children (the load processes, the template) per
point. What the points measure is nothing: the difference is the start.

    python benchmarks/load_process_start.py [--points 12]

The fake server runs on the same machine; its CPU is not counted (it is started before the
measuring, as a separate process group, and is not a child of the session's parent).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from quantbench.load.forkserver import FORK_ENV
from quantbench.load.session import Target, run_session
from quantbench.mock_server import Behaviour, MockServerProcess, Script
from quantbench.workloads.spec import WorkloadSpec


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_session(url: str, points: int, out: Path) -> tuple[float, float]:
    spec = WorkloadSpec.model_validate({
        "prompts": {"source": "random", "input_len": 4, "output_len": 2},
        "num_requests": points, "warmup_requests": 0, "progress_interval_s": 60,
        "load": [{"kind": "concurrency", "concurrency": c} for c in range(1, points + 1)],
    })  # fmt: skip
    cpu0, wall0 = children_cpu_s(), time.monotonic()
    summary = run_session(spec, Target(url=url, engine="mock"), out)
    wall, cpu = time.monotonic() - wall0, children_cpu_s() - cpu0
    assert all(p.completed == points for p in summary.points), "a point did not complete"
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = MockServerProcess(Script(behaviours=[Behaviour()]), work / "srv", log=False)
        server.start()
        try:
            rows = []
            for label, fork in (("forked from a template", "1"), ("started anew", "0")):
                os.environ[FORK_ENV] = fork
                wall, cpu = one_session(server.url, args.points, work / f"out-{fork}")
                rows.append((label, wall, cpu))
        finally:
            server.stop()
    print(
        f"{args.points} points of {args.points} short requests, one session (CPU: the load processes')"
    )
    print("| load process | wall s / point | CPU s / point |")
    print("|---|---|---|")
    for label, wall, cpu in rows:
        print(f"| {label} | {wall / args.points:.2f} | {cpu / args.points:.2f} |")


if __name__ == "__main__":
    main()
