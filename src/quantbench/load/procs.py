"""Child processes of the harness: started in their own process group, stopped by its id.

Every process the harness starts (load processes, Locust workers, the mock server) is a group
leader, so stopping it also stops anything it started, and nothing else is ever signalled. Each
also asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``): a load process runs
in a session of its own, out of reach of the parent's process group, and must not outlive a bench
stage killed with ``kill -9``.
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


# The distributed load run's worker token (see quantbench.load.runner).
TOKEN_ENV = "QB_LOAD_TOKEN"


def die_with_parent() -> None:
    """In a child before exec (Linux): be SIGKILLed when the process that started it dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's finally blocks still stop it on every normal exit


def spawn_module(module: str, args: list[str], **popen: Any) -> subprocess.Popen[str]:
    """``python -m module args...`` as the leader of a new process group, dying with us."""
    env = popen.pop("env", None) or child_env()
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        start_new_session=True,
        env=env,
        text=True,
        preexec_fn=die_with_parent,
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
