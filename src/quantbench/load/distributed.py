"""Distributed load: a Locust master and N worker processes running one plan.

For when one load process cannot keep up (see the harness ceiling in docs/LOAD.md). The master
splits the plan round-robin (worker k of N sends requests k, k+N, k+2N, ... of the same schedule,
so an open loop's merged arrivals are the planned ones), starts every worker at the same instant,
and writes the records the workers stream back into one file.

Here the workers are local processes. On several machines, start the master where the results
should land and a worker on each load machine:

    export QB_LOAD_TOKEN=$(python -c "import secrets; print(secrets.token_urlsafe(24))")
    python -m quantbench.load.runner master --plan plan.json --records out.jsonl \\
        --workers 4 --bind-host 0.0.0.0 --bind-port 5557
    QB_LOAD_TOKEN=... python -m quantbench.load.runner worker --master-host MASTER_IP --master-port 5557

Every worker must present the master's token (``$QB_LOAD_TOKEN``): the plan holds the request
headers (an API key), and the master refuses to run while a process without it is connected.

Workers need only this package and the master's address: the plan travels in Locust messages.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

from quantbench.load.procs import TOKEN_ENV, child_env, spawn_module, stop_group
from quantbench.ports import free_port


def run_distributed(
    plan_path: Path,
    records_path: Path,
    workers: int,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    wait_workers_s: float = 60.0,
) -> int:
    """Run a plan on a master and ``workers`` local worker processes; the master's exit code."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    port = port or free_port(host)
    # The plan carries the request headers: only processes holding this run's token get it.
    env = {**child_env(), TOKEN_ENV: secrets.token_urlsafe(24)}
    master = spawn_module(
        "quantbench.load.runner",
        [
            "master", "--plan", str(plan_path), "--records", str(records_path),
            "--workers", str(workers), "--bind-host", host, "--bind-port", str(port),
            "--wait-workers-s", str(wait_workers_s),
        ],
        env=env,
    )  # fmt: skip
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(workers):
            procs.append(
                spawn_module(
                    "quantbench.load.runner",
                    ["worker", "--master-host", host, "--master-port", str(port)],
                    env=env,
                )
            )
        rc = master.wait()
        for p in procs:
            try:
                p.wait(timeout=15)  # they quit when the master tells them to
            except subprocess.TimeoutExpired:
                stop_group(p)
        return rc
    finally:
        for p in procs:
            stop_group(p)
        stop_group(master)
