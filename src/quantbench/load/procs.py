"""Child processes of the harness: started in their own process group, stopped by its id.

Every process the harness starts (load processes, Locust workers, the fake server) is a group
leader, so stopping it also stops anything it started, and nothing else is ever signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


def child_env() -> dict[str, str]:
    """The environment of a child Python process that must import this package."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    parts = [src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != src]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def spawn_module(module: str, args: list[str], **popen: Any) -> subprocess.Popen[str]:
    """``python -m module args...`` as the leader of a new process group."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        start_new_session=True,
        env=child_env(),
        text=True,
        **popen,
    )


def stop_group(proc: subprocess.Popen[Any], timeout_s: float = 10.0) -> int:
    """SIGTERM the process's group, SIGKILL it if it lingers; returns the exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode
