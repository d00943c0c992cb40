"""Nothing a server starts outlives quantbench: the guard, parent-death signals, PID reuse."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from tests.engines.stranger import serve as serve_stranger

from quantbench.engines.server import MemorySampler, Server

pytestmark = pytest.mark.server

# A "server" that leaves behind what vLLM does: a worker in a session of its own (setsid), and a
# plain child; each writes its PID so the test can look for them afterwards.
SERVER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    out = sys.argv[1]
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    a = subprocess.Popen(sleeper, start_new_session=True)
    b = subprocess.Popen(sleeper)
    with open(out, "w") as f:
        f.write(f"{os.getpid()} {a.pid} {b.pid}")
    time.sleep(600)
    """
)

# A stand-in for a bench stage: starts the server through Server (so under the guard), reports
# the guard's PID, then waits to be killed.
STAGE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from quantbench.engines.base import LaunchSpec
    from quantbench.engines.server import Server
    server_py, pids, log = sys.argv[1:4]
    spec = LaunchSpec("stub", [sys.executable, server_py, pids], {}, "127.0.0.1", 9, "/health",
                      None, "m", 60)
    server = Server(spec, Path(log))
    server.start()
    print(server.process.pid, flush=True)
    time.sleep(600)
    """
)


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _wait_for(path: Path, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def test_sigkill_of_the_stage_leaves_no_process_behind(tmp_path: Path) -> None:
    (tmp_path / "server.py").write_text(SERVER)
    pids_file = tmp_path / "pids"
    stage = subprocess.Popen(
        [sys.executable, "-c", STAGE, str(tmp_path / "server.py"), str(pids_file),
         str(tmp_path / "server.log")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        guard = int(stage.stdout.readline())
        server, setsid_worker, child = (int(x) for x in _wait_for(pids_file).split())
        tree = [guard, server, setsid_worker, child]
        assert _alive(tree) == tree
        os.kill(stage.pid, signal.SIGKILL)  # no handler, no finally: only the kernel sees it
        stage.wait()
        deadline = time.monotonic() + 20
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _alive(tree) == [], "the guard must stop the whole tree, setsid workers included"
    finally:
        if stage.poll() is None:
            stage.kill()


def test_server_exit_status_passes_through_the_guard(tmp_path: Path) -> None:
    from quantbench.engines.base import LaunchSpec
    from quantbench.engines.server import ServerExitedError

    code = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    spec = LaunchSpec("stub", [sys.executable, "-c", code], {}, "127.0.0.1", 9, "/health", None,
                      "m", 30)  # fmt: skip
    with pytest.raises(ServerExitedError, match="killed by SIGSEGV"), Server(spec, tmp_path / "l"):
        pass


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    """Cleanup kills strays it saw in the server's tree; if a PID was reused by an unrelated
    process since, its start time differs and it is left alone."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        server = Server.__new__(Server)
        server.memory = MemorySampler(pid=1)
        # what the sampler recorded for this PID: another process's start time
        server.memory.pids_seen = {stranger.pid: psutil.Process(stranger.pid).create_time() - 5}
        server.spec = None  # type: ignore[assignment]
        server._kill_strays()
        assert stranger.poll() is None, "an unrelated process with a reused PID was killed"
    finally:
        stranger.kill()
        stranger.wait()


def test_load_processes_die_with_a_killed_parent(tmp_path: Path) -> None:
    """Load processes (and the mock server) run in sessions of their own, out of reach of the
    parent's process group: the parent-death signal stops them when the stage is SIGKILLed."""
    code = textwrap.dedent(
        """
        import sys, time
        from quantbench.load.procs import spawn_module
        p = spawn_module("quantbench.mock_server", ["--port", "0"])
        print(p.pid, flush=True)
        time.sleep(600)
        """
    )
    stage = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(stage.stdout.readline())
        assert _alive([child]) == [child]
        os.kill(stage.pid, signal.SIGKILL)
        stage.wait()
        deadline = time.monotonic() + 10
        while _alive([child]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _alive([child]) == []
    finally:
        if stage.poll() is None:
            stage.kill()


def test_readiness_from_a_stranger_on_our_port_is_refused(tmp_path: Path) -> None:
    """A 200 on the health URL proves nothing if another process holds the port: the check looks
    at who is listening."""
    from quantbench.engines.base import LaunchSpec
    from quantbench.engines.server import ServerError
    from quantbench.ports import free_port

    port = free_port()
    never_binds = [sys.executable, "-c", "import time; time.sleep(60)"]
    spec = LaunchSpec("stub", never_binds, {}, "127.0.0.1", port, "/health", None, "m", 15)
    server = Server(spec, tmp_path / "server.log")
    server.start()
    stranger = serve_stranger(port)
    try:
        with pytest.raises(ServerError, match=rf"process {os.getpid()} .* is listening there"):
            server.wait_ready()
    finally:
        stranger.shutdown()
        stranger.server_close()
        server.stop()


def test_a_child_caught_between_fork_and_exec_does_not_hide_the_stranger(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """psutil names one holder of a socket, the process it scanned last; a child forked by the
    holder holds the socket until it execs or exits (our memory sampler forks nvidia-smi every
    interval). Named and gone a moment later, it once hid the stranger: the check passed.

    Which holder psutil names follows the order it scans processes in, by PID: a child that
    got a lower PID than its parent (PIDs wrap around on a machine that has started many) is
    scanned first and the parent named, which failed CI once. So the first scan is made to name
    the child, as it does whenever the child's PID is the higher: the race itself, every time."""
    import socket

    import psutil

    from quantbench.engines import server as server_module

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    child = os.fork()
    if child == 0:  # holds the inherited socket, as a child does before it execs
        time.sleep(60)
        os._exit(0)
    real = psutil.net_connections
    first: list[int | None] = []

    def ours(c) -> bool:  # type: ignore[no-untyped-def]
        return bool(c.laddr) and c.laddr.port == port

    def scan_then_the_child_exits(*args, **kwargs):  # type: ignore[no-untyped-def]
        conns = real(*args, **kwargs)
        if not first:
            # the socket is held by both; the scan names the child (see the docstring)
            assert {c.pid for c in conns if ours(c)} <= {os.getpid(), child}
            conns = [c._replace(pid=child) if ours(c) else c for c in conns]
            first.extend(c.pid for c in conns if ours(c))
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        return conns

    monkeypatch.setattr(psutil, "net_connections", scan_then_the_child_exits)
    try:
        owners = server_module.listening_pids("127.0.0.1", port)
    finally:
        sock.close()
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
    # the race: the first scan named the child, which is gone; the holder is found all the same
    assert first == [child], f"the first scan named {first}, not the child {child}"
    assert owners == {os.getpid()}
