"""The guard: a tiny parent for every server, so nothing it starts outlives quantbench.

    python -m quantbench.engines.guard -- SERVER_ARGV...

A server is not one process: vLLM starts an engine core and workers (some in sessions of their
own), and a process the server leaves behind is re-parented to init, out of reach. The kernel's
parent-death signal reaches only a direct child. So each server runs under this guard, which

* is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): every descendant that loses its parent is
  re-parented to the guard instead of init, so the guard can always find and stop it;
* asks for ``SIGTERM`` when its own parent dies (``PR_SET_PDEATHSIG``): even when the bench stage
  is killed with ``kill -9`` (which no handler sees), the guard is told, and stops the whole tree.
  Linux sends it when the *thread* that started the guard ends, not its process: a server is
  started from a thread that outlives it (the decide stage's side-by-side starts lost both of a
  duel's vLLM servers to a thread pool's exit before ``Server.ready`` said so);
* on ``SIGTERM``/``SIGINT`` (or when the server exits by itself) terminates every descendant
  (SIGTERM, a grace period, then SIGKILL), reaps them, and exits with the server's own status
  (re-raising the server's fatal signal, so the caller sees ``-SIGKILL`` as before).

The server itself is started with ``PR_SET_PDEATHSIG(SIGKILL)`` towards the guard, a second line
should the guard be killed outright. Linux only; elsewhere the guard just runs the server.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 10.0


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _child_dies_with_us() -> None:  # in the server, before exec
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        # the ppid follows the command name, which may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(children.get(child, []))
    return out


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# exit statuses of reaped children, by PID (the server's is looked up here)
REAPED: dict[int, int] = {}


def _reap() -> None:
    """Collect every exited child (the guard is a subreaper: orphans become its children)."""
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = os.waitstatus_to_exitcode(raw)


def stop_tree(grace_s: float = GRACE_S) -> None:
    """SIGTERM every descendant, wait up to ``grace_s``, SIGKILL what is left, reap all."""
    me = os.getpid()
    _signal_all(descendants(me), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap()
        if not descendants(me):
            return
        time.sleep(0.05)
    _signal_all(descendants(me), signal.SIGKILL)
    while descendants(me):
        _reap()
        time.sleep(0.02)
    _reap()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m quantbench.engines.guard -- SERVER_ARGV...", file=sys.stderr)
        return 2
    parent = os.getppid()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    stopping = {"signal": 0}

    def on_signal(signum: int, frame: object) -> None:
        stopping["signal"] = signum

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 1
    server = subprocess.Popen(argv, preexec_fn=_child_dies_with_us)
    while server.pid not in REAPED and not stopping["signal"]:
        _reap()
        if server.pid not in REAPED and not stopping["signal"]:
            time.sleep(0.05)
    stop_tree()
    # the server's own status (stopped from outside: what the stop left it with)
    status = REAPED.get(server.pid, -signal.SIGTERM)
    if status < 0:  # report the server's fatal signal as our own, so callers see -SIGKILL etc.
        with contextlib.suppress(OSError, ValueError):  # SIGKILL/SIGSTOP have no handler to reset
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
