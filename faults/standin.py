"""A stand-in engine server with faults on demand: the scripted mock server, plus process faults.

    python -m faults.standin --qb-pidfile PID [--qb-startup-delay S] [--qb-exit CODE]
        [--qb-workers] [--qb-oom-after N --qb-oom-mb MB] FAKE-SERVER-ARGS...

Per-request faults (HTTP errors, hangs, cut or malformed streams) come from the mock server's
script (:mod:`quantbench.mock_server`); this wrapper adds what happens to the process:

* ``--qb-startup-delay S``: sleep before listening (a server that starts too slowly);
* ``--qb-exit CODE``: print a fatal message and exit at start-up;
* ``--qb-workers``: spawn worker processes the way vLLM does, made hard to stop: one in the
  server's process group and one in a session of its own, both ignoring SIGTERM, and that
  second one with a child of its own; their PIDs go to ``<pidfile>.workers``;
* ``--qb-oom-after N --qb-oom-mb MB``: once N requests have ended (counted in the ``--log``
  truth file), allocate MB MiB, hold it while serving two more (and at least 0.6 s, so the
  memory sampler sees it), then SIGKILL itself. That is how the kernel's OOM killer ends a process; here the kill is simulated
  (no cgroup limit is set), so the report's wording can be checked without starving the machine;
* ``--api-key KEY``, ``--hf-token TOKEN``: accepted and ignored, like engine flags whose values
  must never show up in a report.

Every other argument goes to the mock server, whose own argument parser rejects unknown ones:
that is the "engine's own error" for an unknown engine setting.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SLEEPER = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(3600)\n"
# A worker in its own session that starts a child of its own (a grandchild of the server).
PARENT_SLEEPER = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[1]])\n"
    "with open(sys.argv[2], 'a') as f: f.write(str(child.pid) + '\\n')\n"
    "time.sleep(3600)\n"
)


def spawn_workers(pidfile: Path) -> None:
    workers_file = pidfile.with_name(pidfile.name + ".workers")
    in_group = subprocess.Popen([sys.executable, "-c", SLEEPER])
    own_session = subprocess.Popen(
        [sys.executable, "-c", PARENT_SLEEPER, SLEEPER, str(workers_file)],
        start_new_session=True,
    )
    with workers_file.open("a", encoding="utf-8") as f:
        f.write(f"{in_group.pid}\n{own_session.pid}\n")
    print(
        f"standin: spawned workers {in_group.pid} and {own_session.pid} (own session)", flush=True
    )


def count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def oom_after(truth_log: Path, requests: int, mb: int) -> None:
    while count_lines(truth_log) < requests:
        time.sleep(0.02)
    ballast = b"\x01" * (mb << 20)  # written, so resident
    print(f"standin: allocated {len(ballast) >> 20} MiB after {requests} requests", flush=True)
    # Die while serving: two more requests finished (so others are in flight), and at least
    # 0.6 s after the allocation, so the memory sampler (every 0.5 s) has seen it.
    grown = time.monotonic() + 0.6
    while count_lines(truth_log) < requests + 2 or time.monotonic() < grown:
        time.sleep(0.02)
    print("standin: simulating the kernel OOM killer: SIGKILL to itself", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m faults.standin", description=__doc__, allow_abbrev=False
    )
    parser.add_argument("--qb-pidfile", type=Path, required=True)
    parser.add_argument("--qb-startup-delay", type=float, default=0.0)
    parser.add_argument("--qb-exit", type=int, default=None)
    parser.add_argument("--qb-workers", action="store_true")
    parser.add_argument("--qb-oom-after", type=int, default=None)
    parser.add_argument("--qb-oom-mb", type=int, default=256)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--hf-token", default=None)
    parser.add_argument("--log", type=Path, default=None)
    args, rest = parser.parse_known_args(argv)
    args.qb_pidfile.write_text(str(os.getpid()), encoding="utf-8")
    print(f"standin: pid {os.getpid()}, mock server args {json.dumps(rest)}", flush=True)
    if args.qb_exit is not None:
        print("fatal: cannot load model weights (standin exits at start-up)", flush=True)
        return args.qb_exit
    if args.qb_workers:
        spawn_workers(args.qb_pidfile)
    if args.qb_startup_delay:
        print(f"standin: loading for {args.qb_startup_delay:g} s", flush=True)
        time.sleep(args.qb_startup_delay)
    if args.log is not None:
        rest += ["--log", str(args.log)]
        if args.qb_oom_after is not None:
            threading.Thread(
                target=oom_after, args=(args.log, args.qb_oom_after, args.qb_oom_mb), daemon=True
            ).start()
    from quantbench.mock_server import main as fake_server_main

    return fake_server_main(rest)


if __name__ == "__main__":
    sys.exit(main())
