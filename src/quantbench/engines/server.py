"""One server lifecycle for every engine: start, wait until ready, watch memory, always stop.

- The server runs in its own process group (and session), so one signal reaches every worker it
  spawns (vLLM starts several); teardown sends SIGTERM to the group, waits, then SIGKILLs it and any
  descendant that left the group.
- Readiness is polled with a deadline while watching for an early exit: a server that dies during
  start-up is reported at once with the last lines of its log, not after the deadline.
- Memory of the whole process tree is sampled while it runs: its host memory (peak RSS) and, on
  a GPU machine, the GPU memory its processes hold (peak, through quantbench.accelerator's
  telemetry: NVML, else nvidia-smi; nothing is asked on a CPU machine). A server's memory is
  the two together: ``peak_rss_bytes`` + ``peak_gpu_bytes``.
- The log goes to a file that is kept.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from quantbench.accelerator.telemetry import Telemetry
from quantbench.engines import guard
from quantbench.engines.base import LaunchSpec
from quantbench.engines.memory import gpu_shortfall, shortfall
from quantbench.errors import UserError
from quantbench.load.records import RequestRecord
from quantbench.load.streaming import StreamError, StreamParser
from quantbench.ports import check_port_free

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 30


class ServerError(UserError):
    """A server failed to start, died, or did not become ready; the message carries its log tail."""


class ServerExitedError(ServerError):
    """The server process exited (during start-up or while serving)."""


class _EmptyAnswer(ValueError):
    """A whole, well-formed stream with no content (a model may answer EOS at once)."""


class ServerTimeoutError(ServerError):
    """The server did not answer its readiness check before the deadline."""


class PortLostError(ServerError):
    """Another process took the server's port between its choice and the server's bind: the
    server failed to bind it, or a stranger answers there. Not the server's fault: a start on
    another port is the remedy (`Server(relaunch=...)` does it)."""


# What a server prints when its bind fails: the OS's own words (vLLM, Python servers, faults.proxy)
# and llama-server's
BIND_FAILED = re.compile(r"address already in use|couldn't bind", re.IGNORECASE)
# Starts tried on fresh ports before a lost port counts as the start's failure
PORT_TRIES = 3


def _listening(conn: Any, host: str, port: int) -> bool:
    import psutil

    return bool(
        conn.status == psutil.CONN_LISTEN
        and conn.laddr
        and conn.laddr.port == port
        and conn.laddr.ip in (host, "0.0.0.0", "::")
    )


def _holds(pid: int, host: str, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on (host, port) now."""
    import psutil

    try:
        return any(_listening(c, host, port) for c in psutil.Process(pid).net_connections("inet"))
    except (psutil.Error, OSError):
        return False


def listening_pids(host: str, port: int, scans: int = 5) -> set[int]:
    """The PIDs of the processes holding a socket listening on (host, port), where the OS lets
    us see them; empty where no such socket is seen or its holders are hidden from us.

    psutil maps each socket to one of the processes that hold it, the one it scanned last. A
    process that forks holds its sockets in the child until the child execs (or exits): a
    child caught in that window (our own memory sampler forks nvidia-smi every interval on a
    GPU machine without NVML) is named instead of the real holder, and is gone a moment later.
    So each holder named is checked to hold the socket still, and the scan is repeated, a few
    times, until every listening socket it saw has a holder that does."""
    import psutil

    found: set[int] = set()
    for scan in range(scans):
        try:
            conns = [c for c in psutil.net_connections(kind="inet") if _listening(c, host, port)]
        except (psutil.Error, OSError):
            conns = []
        named = {int(c.pid) for c in conns if c.pid is not None}
        held = {pid for pid in named if _holds(pid, host, port)}
        found |= held
        if named == held:
            # every holder named is real; a socket with no holder named (pid None) belongs
            # to someone whose processes we may not look into: scanning again will not help
            return found
        time.sleep(0.01 * (scan + 1))
    return found


def process_summary(pid: int) -> str:
    import psutil

    try:
        return " ".join(psutil.Process(pid).cmdline())[:120] or "unknown"
    except psutil.Error:
        return "unknown"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def describe_exit(code: int, asked_to_stop: bool = False) -> str:
    """'exit code 1', or the signal's name for a killed process: a SIGKILL nobody asked for
    often means OOM; one after our SIGTERM is the guard's, for a server that did not stop in its
    grace period (quantbench.engines.guard)."""
    if code < 0:
        name = signal.Signals(-code).name
        hint = ""
        if name == "SIGKILL":
            hint = (
                " (it did not stop within the grace period after SIGTERM)"
                if asked_to_stop
                else " (killed: out of memory? check `dmesg`)"
            )
        return f"killed by {name}{hint}"
    return f"exit code {code}"


@dataclass
class MemorySampler:
    """Samples a process tree's host memory (RSS) and GPU memory in a background thread; keeps
    each one's peak (``peak_gpu_bytes`` None: no GPU, or nothing answered)."""

    pid: int
    interval_s: float = 0.5
    skip_root: bool = False
    """Leave the root out of the sum (the guard, whose few MB are not the server's)."""
    peak_rss_bytes: int = 0
    peak_gpu_bytes: int | None = None
    samples: int = 0
    pids_seen: dict[int, float] = field(default_factory=dict)
    """Every process seen in the tree, with its start time: a PID is only ever signalled if the
    process behind it still has that start time (PIDs are reused)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _telemetry: Telemetry | None = None

    @property
    def telemetry(self) -> Telemetry:
        """The GPUs' counters, opened once for this sampler (inert on a CPU machine)."""
        if self._telemetry is None:
            self._telemetry = Telemetry()
        return self._telemetry

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._telemetry is not None:
            self._telemetry.close()

    def sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        rss = 0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                self.pids_seen.setdefault(proc.pid, proc.create_time())
                if not (self.skip_root and proc.pid == self.pid):
                    rss += proc.memory_info().rss
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        gpu = self.telemetry.process_memory(p.pid for p in procs)
        if gpu is not None:
            self.peak_gpu_bytes = max(self.peak_gpu_bytes or 0, gpu)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)


def _answer(request: urllib.request.Request, timeout_s: float) -> Any:
    """urlopen, where an HTTP error status becomes a ValueError carrying the server's own reason
    (vLLM says in the body why it refused a request; urllib's message says only "Bad Request")."""
    try:
        return urllib.request.urlopen(request, timeout=timeout_s)
    except urllib.error.HTTPError as exc:
        with exc:
            body = exc.read(400).decode("utf-8", "replace").strip()
        raise ValueError(
            f"HTTP {exc.code} {exc.reason}: {' '.join(body.split()) or '(no body)'}"
        ) from None


class Server:
    """A running engine server. Use as a context manager: it is always stopped on exit."""

    def __init__(
        self,
        spec: LaunchSpec,
        log_path: Path,
        stop_timeout_s: float = 15,
        relaunch: Callable[[], LaunchSpec] | None = None,
    ) -> None:
        """``relaunch`` gives the same launch on a freshly chosen port: with it, a start whose
        port another process took first (PortLostError) is tried again there, up to PORT_TRIES
        starts in all; without it (a port the user chose) the lost port is the error."""
        self.spec = spec
        self.relaunch = relaunch
        self.log_path = log_path
        self.stop_timeout_s = stop_timeout_s
        self.asked_to_stop = False  # stop() sent SIGTERM while it ran
        self.tmp_dir: Path | None = None  # the server's own TMPDIR, removed when it stops
        self.process: subprocess.Popen[bytes] | None = None
        self.memory: MemorySampler | None = None
        self.started_at = 0.0
        self.ready_seconds: float | None = None
        self.exit_code: int | None = None

    @property
    def url(self) -> str:
        return self.spec.base_url

    def tail(self) -> str:
        """The end of the server's log, with this launch's secrets hidden (engines echo their
        command line, and the tail is copied into rows, summaries and the report)."""
        return self.spec.redact(log_tail(self.log_path))

    def start(self) -> None:
        check_port_free(self.spec.host, self.spec.port)

        short = shortfall(self.spec.memory_needs, self.spec.engine)
        if short is None and self.spec.gpu_memory is not None:
            short = gpu_shortfall(self.spec.gpu_memory, self.spec.engine)
        if short is not None:
            raise ServerError(short)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting %s: %s", self.spec.engine, " ".join(self.spec.redacted_argv()))

        # Under the guard (see engines/guard.py): nothing the server starts outlives us, even
        # when this process is killed with SIGKILL.
        argv = [sys.executable, str(Path(guard.__file__)), "--", *self.spec.argv]
        # a temporary folder of its own, removed once it has stopped: vLLM leaves its ZMQ
        # sockets and `vllm_dist_*` files in the system's temporary folder at every start (483
        # sockets in /tmp after a day of runs here); a TMPDIR the launch sets is kept
        self.tmp_dir = Path(tempfile.mkdtemp(prefix=f"qb-{self.spec.engine}-"))
        with open(self.log_path, "wb") as log_file:
            self.process = subprocess.Popen(
                argv,
                env={**os.environ, "TMPDIR": str(self.tmp_dir), **self.spec.env},
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: one signal reaches all workers
            )
        self.started_at = time.monotonic()
        self.memory = MemorySampler(self.process.pid, skip_root=True)
        self.memory.start()

    def exit_code_now(self, grace_s: float = 3.0) -> int | None:
        """The server's exit code, or None while it runs. The server runs under the guard, which
        exits with its code once it has reaped what the server left: when the server itself is
        gone but the guard is still cleaning up, wait up to ``grace_s`` for the code."""
        import psutil

        if self.process is None:
            return None
        code = self.process.poll()
        if code is not None:
            return code
        try:
            alive = [
                p
                for p in psutil.Process(self.process.pid).children(recursive=True)
                if p.status() != psutil.STATUS_ZOMBIE
            ]
        except psutil.Error:
            alive = []
        if alive:
            return None
        try:
            return self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return None

    def check_alive(self, during: str) -> None:
        assert self.process is not None
        code = (
            self.exit_code_now(grace_s=0.0) if self.process.poll() is None else self.process.poll()
        )
        if code is not None:
            self.exit_code = code
            tail = self.tail()
            lost = self.ready_seconds is None and BIND_FAILED.search(tail)
            raise (PortLostError if lost else ServerExitedError)(
                f"{self.spec.engine} server {describe_exit(code)} {during}"
                f"{f' (port {self.spec.port} taken by another process)' if lost else ''}; "
                f"last lines of {self.log_path}:\n{tail}"
            )

    def tree_pids(self) -> set[int]:
        """The server process and every descendant alive now."""
        import psutil

        assert self.process is not None
        try:
            root = psutil.Process(self.process.pid)
            return {root.pid, *(p.pid for p in root.children(recursive=True))}
        except psutil.Error:
            return set()

    def check_ours(self) -> None:
        """The process listening on our port must be the server we started (or one of its
        workers), not whatever else took the port: a 200 from a stranger proves nothing."""
        owners = listening_pids(self.spec.host, self.spec.port)
        if not owners:
            return  # not visible (another user's socket): the model check below still runs
        if not owners & self.tree_pids():
            owner = min(owners)
            raise PortLostError(
                f"port {self.spec.port} answered {self.spec.ready_path}, but process {owner} "
                f"({process_summary(owner)}) is listening there, not the {self.spec.engine} "
                "server quantbench started; stop it or let quantbench pick another port"
            )

    def wait_ready(self, timeout_s: float | None = None) -> float:
        """Poll the readiness URL until it answers 200 from our own process; return the seconds
        it took."""
        deadline = time.monotonic() + (timeout_s or self.spec.startup_timeout_s)
        url = self.url + self.spec.ready_path
        while True:
            self.check_alive("during start-up")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        self.check_ours()
                        self.ready_seconds = time.monotonic() - self.started_at
                        log.info(
                            "%s ready in %.1f s at %s",
                            self.spec.engine,
                            self.ready_seconds,
                            self.url,
                        )
                        return self.ready_seconds
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServerTimeoutError(
                    f"{self.spec.engine} server not ready after "
                    f"{timeout_s or self.spec.startup_timeout_s:.0f} s "
                    f"(engines.{self.spec.engine}.startup_timeout_s); last lines of "
                    f"{self.log_path}:\n{self.tail()}"
                )
            time.sleep(0.25)

    def chat(self, content: str, max_tokens: int = 16, timeout_s: float = 120) -> str:
        """One streaming chat request, greedy; returns the streamed text (used for warm-up and
        checks). Fails as :meth:`stream` does, except an empty answer that ends properly, which
        a model may give."""
        body = {
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        try:
            record = self.stream(body, timeout_s)
        except _EmptyAnswer:
            return ""
        return record.output_text or ""

    def stream(self, body: dict[str, Any], timeout_s: float = 120) -> RequestRecord:
        """One streaming chat request with ``body`` (model and ``stream`` are set here); returns
        the harness's record of it (send, first-token and end times, the server's token counts).

        The stream is read by the load harness's own parser, so what fails a measured request
        fails here too, as a ValueError naming why (an event of the wrong shape, a stream cut
        short). ``timeout_s`` bounds the whole request, not only each read, so a server that
        sends keep-alive comments forever cannot hold the caller (TimeoutError).
        """
        body = {**body, "model": self.spec.model_name, "stream": True}
        request = urllib.request.Request(
            self.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        started = time.monotonic()
        record = RequestRecord(
            request_id="check", index=0, point="check", scenario="check", prompt_id="check",
            phase="warmup", worker=0, send_time=started,
        )  # fmt: skip
        parser = StreamParser(record, "chat")
        try:
            with _answer(request, timeout_s) as response:
                for raw in response:
                    now = time.monotonic()
                    if now - started > timeout_s:
                        raise TimeoutError(
                            f"no complete answer within {timeout_s:g} s "
                            f"({len(record.chunk_times)} chunks so far)"
                        )
                    parser.feed_line(raw, now)
                    if parser.done:
                        break
            record.end_time = time.monotonic()
            parser.finish()
        except StreamError as exc:
            if not record.chunk_times and (parser.done or record.finish_reason is not None):
                # A whole, well-formed answer that happens to be empty (the model chose EOS at
                # once): nothing wrong with the server; the caller judges the answer.
                raise _EmptyAnswer(str(exc)) from None
            raise ValueError(f"unusable answer stream: {exc}") from None
        return record

    def warmup(self, timeout_s: float = 120) -> str:
        """A first request, so one-time costs (lazy loading, kernel selection) are not measured.

        A server that dies, hangs (no bytes for `timeout_s`) or answers garbage here fails with a
        ServerError, like one that does not start: it costs its own points, not the run.
        """
        self.check_alive("before warm-up")
        try:
            return self.chat("Hello!", max_tokens=8, timeout_s=timeout_s)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            self.check_alive("during warm-up")
            raise ServerError(
                f"{self.spec.engine} server failed its warm-up request "
                f"({type(exc).__name__}: {exc}); last lines of {self.log_path}:\n"
                f"{self.tail()}"
            ) from None

    def stop(self) -> None:
        """SIGTERM the process group, wait, SIGKILL what is left; reap every descendant seen."""
        if self.process is None:
            if self.tmp_dir is not None:  # the start failed after making it
                shutil.rmtree(self.tmp_dir, ignore_errors=True)
            return
        pid = self.process.pid
        if self.memory is not None:
            self.memory.sample()  # a last look at the tree, to know every descendant
            self.memory.stop()
        if self.process.poll() is None:
            self.asked_to_stop = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop on SIGTERM; killing it", self.spec.engine)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self.exit_code = self.process.wait()
        self._kill_strays()
        if self.tmp_dir is not None:
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
        log.info(
            "%s stopped (%s)", self.spec.engine, describe_exit(self.exit_code, self.asked_to_stop)
        )

    def _kill_strays(self) -> None:
        """Kill descendants that left the process group (setsid workers) and still run."""
        import psutil

        seen = self.memory.pids_seen if self.memory is not None else {}
        killed = []
        for pid, started in seen.items():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if proc.create_time() != started:
                    continue  # the PID was reused by an unrelated process: never touch it
                if proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()
                    killed.append(proc)
        if killed:
            log.warning("killed %d stray process(es) of %s", len(killed), self.spec.engine)
            psutil.wait_procs(killed, timeout=5)

    def report(self) -> dict[str, Any]:
        memory = self.memory
        return {
            "engine": self.spec.engine,
            "argv": self.spec.redacted_argv(),
            "env": self.spec.redacted_env(),
            "url": self.url,
            "ready_seconds": self.ready_seconds,
            "peak_rss_bytes": memory.peak_rss_bytes if memory else None,
            "peak_gpu_bytes": memory.peak_gpu_bytes if memory else None,
            "memory_samples": memory.samples if memory else 0,
            "exit": describe_exit(self.exit_code, self.asked_to_stop)
            if self.exit_code is not None
            else None,
            "log": str(self.log_path),
        }

    def __enter__(self) -> Server:
        self.start()
        return self.ready()

    def ready(self) -> Server:
        """Wait for the server :meth:`start` started. A port lost to another process starts it
        again on another (``PORT_TRIES`` starts in all); a server that does not come up is
        stopped and its error raised. Call it from the thread that called :meth:`start`, or
        one that outlives it: the guard is told its parent died when the *thread* that started
        it ends (``PR_SET_PDEATHSIG``), and stops the server."""
        for attempt in range(1, PORT_TRIES + 1):
            try:
                self.wait_ready()
                return self
            except PortLostError as exc:
                self.stop()
                if self.relaunch is None or attempt == PORT_TRIES:
                    raise
                # free_port's choice is a race by nature (the port is free when chosen, bound
                # seconds later: vLLM imports for 15 s first); another start elsewhere is cheap
                log.warning("%s; starting again on another port", str(exc).splitlines()[0])
                self.spec = self.relaunch()
                self.ready_seconds = self.exit_code = None
                self.asked_to_stop = False
                self.start()
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Any:
    """Turn SIGTERM into KeyboardInterrupt so `finally`/`with` blocks stop servers on `kill`."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
