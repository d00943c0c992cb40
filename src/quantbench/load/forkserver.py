"""Load processes forked from a template that has already imported Locust.

Every point runs in a load process of its own: a point's greenlets, sockets, garbage and a crash
stay in it, and its process group is stopped by its id (:mod:`quantbench.load.procs`). Starting
``python -m quantbench.load.runner`` costs about 1.3 s of CPU on a quiet 2-core EPYC and 2-2.5 s
beside a busy server, nearly all of it importing Locust (gevent, Flask, requests): more than
many CPU-sized points take to measure, paid again at every point of a grid, a search or a
decision round.

So a bench pair (or a session, or a decision) starts one *template* process per scope, which
imports the runner once and then forks one load process per point. The forked process is the
same process a fresh start would be, as the parent sees it: in a session and process group of its
own, with the parent's current stdout and stderr (passed over a Unix socket, so a log or a
pytest capture opened after the template started still gets its lines), working directory and
environment variables, its exit status (a signal's as a negative code, as `subprocess` gives),
and stopped by its group id. It dies with its template and the template with the parent
(``PR_SET_PDEATHSIG`` on both), so a bench stage killed with ``kill -9`` leaves nothing.

What a fork cannot carry is the environment the kernel shows for the process (``/proc/<pid>/
environ`` is the template's, from its start): a point started while the parent's environment
differs from the template's starts the old way, so anything that finds processes by an
environment variable (the fault table's census) still finds them. ``QUANTBENCH_LOAD_FORK=0``
turns the templates off (every point a fresh ``python -m``), to rule them out.

    with load_processes():               # one template for everything inside
        proc = start_local(["local", "--plan", p, "--records", r])
        rc = proc.wait()
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from quantbench.load.procs import child_env, die_with_parent, spawn_module, stop_group

FORK_ENV = "QUANTBENCH_LOAD_FORK"
_HEADER = struct.Struct("!I")


def enabled() -> bool:
    return os.environ.get(FORK_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class ForkedProcess:
    """A load process forked by a template: what `stop_group` and `run_plan` use of a Popen."""

    def __init__(self, pid: int, replies: _Replies, lock: threading.Lock) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._replies = replies
        self._lock = lock  # held from the fork until the exit status is read

    def _read_status(self, timeout: float | None) -> int | None:
        try:
            line = self._replies.line(timeout)
        except (TimeoutError, BlockingIOError):
            return None
        # EOF: the template died (killed, or with its parent thread), and its children with it
        self.returncode = -signal.SIGKILL if line is None else int(line.split()[1])
        self._lock.release()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and self._read_status(timeout) is None:
            raise subprocess.TimeoutExpired(f"load process {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


class _Replies:
    """The template's replies: short newline-ended lines, read with or without waiting."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def line(self, timeout: float | None = None) -> str | None:
        """The next line (None at EOF); TimeoutError when none came within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while b"\n" not in self.buf:
                chunk = self.sock.recv(256)
                if not chunk:
                    return None
                self.buf += chunk
        finally:
            self.sock.settimeout(None)
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


class Template:
    """One template process: forks a load process per request, one at a time."""

    def __init__(self) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.env = child_env()
        try:
            self.proc = spawn_module(
                "quantbench.load.runner",
                ["template", "--fd", str(child_end.fileno())],
                env=self.env,
                stdin=subprocess.DEVNULL,
                pass_fds=(child_end.fileno(),),
            )
        finally:
            child_end.close()
        self.channel = parent_end
        self.replies = _Replies(parent_end)
        self.lock = threading.Lock()
        self.failed = False

    def fits(self) -> bool:
        """Alive, and started under the environment the parent has now."""
        return not self.failed and self.proc.poll() is None and self.env == child_env()

    def start(self, argv: Sequence[str]) -> ForkedProcess | None:
        """Fork a load process running ``argv``; None when the template cannot (start it anew)."""
        if not self.lock.acquire(blocking=False):
            return None  # another thread's point is running on this template
        request = json.dumps({"argv": list(argv), "cwd": os.getcwd(), "env": child_env()})
        try:
            payload = request.encode()
            # the parent's stdout and stderr as they are now, for the load process to write to
            sys.stdout.flush()
            sys.stderr.flush()
            socket.send_fds(self.channel, [_HEADER.pack(len(payload)) + payload], [1, 2])
            line = self.replies.line()
            if line is None or not line.startswith("pid "):
                raise OSError(f"template answered {line!r}")
            return ForkedProcess(int(line.split()[1]), self.replies, self.lock)
        except OSError:
            self.failed = True
            self.lock.release()
            return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.channel.close()  # the template reads the end of its requests and exits
        stop_group(self.proc, timeout_s=5.0)


_local = threading.local()


@contextlib.contextmanager
def load_processes() -> Iterator[None]:
    """Points started inside fork from one template (this thread's, made here if none is)."""
    if getattr(_local, "scoped", False) or not enabled():
        yield
        return
    _local.template = None
    _local.scoped = True
    try:
        yield
    finally:
        template = _local.template
        _local.template = None
        _local.scoped = False
        if template is not None:
            template.close()


def start_local(argv: Sequence[str]) -> ForkedProcess | subprocess.Popen[str]:
    """A load process running ``python -m quantbench.load.runner argv``: forked from this thread's
    template inside :func:`load_processes`, else (or where the template cannot) started anew."""
    if getattr(_local, "scoped", False) and enabled():
        template = _local.template
        if template is not None and not template.fits():
            template.close()
            template = _local.template = None
        if template is None:
            try:
                template = _local.template = Template()
            except OSError:
                template = None
        if template is not None and template.fits():
            forked = template.start(argv)
            if forked is not None:
                return forked
    return spawn_module("quantbench.load.runner", list(argv))


# --- the template process -------------------------------------------------------------------


def _recv_request(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    data, fds, _flags, _addr = socket.recv_fds(sock, 65536, 2)
    if not data:
        return None
    while len(data) < _HEADER.size:
        more = sock.recv(65536)
        if not more:
            return None
        data += more
    (size,) = _HEADER.unpack_from(data)
    body = data[_HEADER.size :]
    while len(body) < size:
        more = sock.recv(size - len(body))
        if not more:
            return None
        body += more
    return json.loads(body), list(fds)


def _child(
    run: Any, template: int, request: dict[str, Any], fds: list[int], sock: socket.socket
) -> None:
    """In the forked load process: become what a fresh start would be, run the point, exit."""
    code = 1
    try:
        os.setsid()  # a session and process group of its own, stopped by its id
        die_with_parent()  # with the template, which dies with the parent
        if os.getppid() != template:
            return  # the template died before the line above: so does this process
        ready = fds.pop()
        os.write(ready, b"1")  # the template may give the parent this pid now
        os.close(ready)
        sock.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (devnull, *fds):
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        try:
            code = run(request["argv"])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(fd: int, run: Callable[[list[str]], int]) -> int:
    """The template's loop (``python -m quantbench.load.runner template``, so Locust has patched
    the process with gevent first, as in a fresh load process; ``run`` is the runner's ``main``):
    a request in, a fork, its pid out, its exit status out. It forks through gevent, so each
    child's event loop starts afresh."""
    from gevent import monkey
    from gevent.os import fork_gevent

    waitpid = monkey.get_original("os", "waitpid")
    raw = monkey.get_original("socket", "socket")
    sock = raw(fileno=fd)
    # the template itself does nothing on a signal but die; SIGINT is its parent's to decide
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    template = os.getpid()
    while True:
        got = _recv_request(sock)
        if got is None:
            return 0  # the parent closed its end (or died): no more points
        request, fds = got
        ready_r, ready_w = os.pipe()
        pid = fork_gevent()
        if pid == 0:
            os.close(ready_r)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _child(run, template, request, [*fds, ready_w], sock)
        for fd in (*fds, ready_w):
            os.close(fd)
        # the pid goes out once the child leads its own group (a byte, or its end closing if it
        # died first): a stop sent to the group at once must reach it
        os.read(ready_r, 1)
        os.close(ready_r)
        sock.sendall(f"pid {pid}\n".encode())
        _, status = waitpid(pid, 0)
        sock.sendall(f"rc {os.waitstatus_to_exitcode(status)}\n".encode())
