"""Server lifecycle on a stand-in process: readiness, early exit, timeout, ports, teardown."""

from __future__ import annotations

import contextlib
import http.server
import socket
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from tests.engines.stranger import serve as serve_stranger

from quantbench.engines.base import LaunchSpec
from quantbench.engines.server import (
    PortLostError,
    Server,
    ServerError,
    ServerExitedError,
    ServerTimeoutError,
)
from quantbench.ports import PortInUseError, check_port_free, free_port

FAKE = Path(__file__).with_name("fake_engine.py")


def spec(mode: str, port: int | None = None, timeout: float = 20) -> LaunchSpec:
    port = port or free_port()
    return LaunchSpec(
        engine="fake",
        argv=[sys.executable, str(FAKE), str(port), mode],
        env={"OMP_NUM_THREADS": "1"},
        host="127.0.0.1",
        port=port,
        ready_path="/health",
        metrics_path=None,
        model_name="fake",
        startup_timeout_s=timeout,
    )


def alive(pids: set[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_ready_then_stopped_with_memory_and_log(tmp_path) -> None:
    server = Server(spec("ok"), tmp_path / "log.txt")
    with server:
        assert server.ready_seconds is not None and server.ready_seconds < 20
        time.sleep(0.6)
        pid = server.process.pid
    report = server.report()
    assert report["peak_rss_bytes"] > 1_000_000
    assert report["memory_samples"] >= 1
    assert "fake engine starting" in (tmp_path / "log.txt").read_text()
    assert not alive({pid})


def test_exit_at_startup_is_reported_fast_with_log_tail(tmp_path) -> None:
    start = time.monotonic()
    with pytest.raises(ServerExitedError) as info, Server(spec("exit", 120), tmp_path / "log.txt"):
        pass
    assert time.monotonic() - start < 15, "an early exit must not wait for the deadline"
    message = str(info.value)
    assert "exit code 3" in message and "during start-up" in message
    assert "cannot load model weights" in message


def test_never_ready_times_out_and_is_killed(tmp_path) -> None:
    server = Server(spec("slow", timeout=2), tmp_path / "log.txt")
    with pytest.raises(ServerTimeoutError, match="not ready after 2 s"), server:
        pass
    assert server.process.poll() is not None


def test_whole_process_tree_is_reaped(tmp_path) -> None:
    server = Server(spec("children"), tmp_path / "log.txt")
    with server:
        time.sleep(1.0)  # let the sampler see the workers
        server.memory.sample()
        tree = set(server.memory.pids_seen)
    assert len(tree) >= 3, tree
    assert alive(tree) == [], "no process of the server's tree may survive"


def test_crash_while_serving_is_described_as_a_kill(tmp_path) -> None:
    server = Server(spec("crash-after"), tmp_path / "log.txt")
    with server:
        time.sleep(2.0)
        with pytest.raises(ServerExitedError, match="killed by SIGKILL"):
            server.check_alive("while serving")


def test_a_server_killed_for_not_stopping_is_not_called_out_of_memory(tmp_path) -> None:
    """A llama-server that did not stop within the guard's grace after our SIGTERM was reported
    "killed by SIGKILL (killed: out of memory? check `dmesg`)" in the decide stage's log: the
    SIGKILL was ours. A SIGKILL nobody asked for keeps the hint (the test above)."""
    server = Server(spec("deaf"), tmp_path / "log.txt")
    with server:
        pass
    exit_text = server.report()["exit"]
    assert exit_text.startswith("killed by SIGKILL"), exit_text
    assert "did not stop within the grace period after SIGTERM" in exit_text
    assert "out of memory" not in exit_text


def test_what_a_server_leaves_in_its_temporary_folder_goes_with_it(tmp_path) -> None:
    """vLLM leaves its ZMQ sockets and `vllm_dist_*` files in the temporary folder at every
    start (483 sockets in /tmp after a day here): each server gets a folder of its own, removed
    once it has stopped."""
    import tempfile

    server = Server(spec("litter"), tmp_path / "log.txt")
    with server:
        deadline = time.monotonic() + 10
        while "littered" not in (tmp_path / "log.txt").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        line = next(x for x in (tmp_path / "log.txt").read_text().splitlines() if "littered" in x)
        litter = Path(line.split()[-1])
        assert litter.is_file() and litter.parent == server.tmp_dir
        assert server.tmp_dir is not None
        assert server.tmp_dir.parent == Path(tempfile.gettempdir())  # not the system folder itself
    assert not litter.exists() and not server.tmp_dir.exists()


def test_port_in_use_is_a_clear_error(tmp_path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1 is already in use"):
            check_port_free("127.0.0.1", port)
        with pytest.raises(PortInUseError), Server(spec("ok", port=port), tmp_path / "log.txt"):
            pass


def test_interrupt_during_use_still_stops_the_server(tmp_path) -> None:
    server = Server(spec("ok"), tmp_path / "log.txt")
    with pytest.raises(KeyboardInterrupt), server:
        pid = server.process.pid
        raise KeyboardInterrupt
    assert not alive({pid})


# --- warm-up and check requests read the stream as the load harness does ------------------------


def _mock_spec(tmp_path: Path, behaviour: dict, **script: object) -> LaunchSpec:
    """The scripted server as the engine: our lifecycle and stream reading, its known answers."""
    from quantbench.mock_server import Script

    path = tmp_path / "script.json"
    path.write_text(Script.model_validate({"behaviours": [behaviour], **script}).model_dump_json())
    port = free_port()
    return LaunchSpec(
        engine="mock",
        argv=[sys.executable, "-m", "quantbench.mock_server", "--port", str(port),
              "--script", str(path)],
        env={"OMP_NUM_THREADS": "1"},
        host="127.0.0.1",
        port=port,
        ready_path="/health",
        metrics_path=None,
        model_name="mock-model",
        startup_timeout_s=20,
    )  # fmt: skip


def test_a_sound_stream_warms_up(tmp_path) -> None:
    with Server(_mock_spec(tmp_path, {"output_tokens": 4}), tmp_path / "log.txt") as server:
        assert server.warmup(timeout_s=10).strip()


@pytest.mark.parametrize(
    ("behaviour", "script", "reason"),
    [
        # Once escaped the warm-up as an AttributeError and lost the whole pair.
        ({"wrong_shape_after_tokens": 1}, {}, "'delta' is a str"),
        ({"output_tokens": 3, "close_after_tokens": 0}, {}, "failed its warm-up"),
        ({"output_tokens": 3, "close_after_tokens": 2}, {}, "failed its warm-up"),
    ],
    ids=["wrong-shape", "closed-before-a-token", "closed-mid-stream"],
)
def test_a_broken_warm_up_stream_is_a_server_error(tmp_path, behaviour, script, reason) -> None:
    spec = _mock_spec(tmp_path, behaviour, **script)
    with Server(spec, tmp_path / "log.txt") as server, pytest.raises(ServerError, match=reason):
        server.warmup(timeout_s=10)


def test_an_empty_answer_that_ends_properly_warms_up(tmp_path) -> None:
    # A model may answer 'Hello!' with EOS at once: a whole, empty answer, not a broken server.
    with Server(_mock_spec(tmp_path, {"output_tokens": 0}), tmp_path / "log.txt") as server:
        assert server.warmup(timeout_s=10) == ""


def test_keep_alive_comments_cannot_hold_the_warm_up_forever(tmp_path) -> None:
    # Each read gets bytes in time, so only a deadline on the whole request stops it.
    behaviour = {"stall_after_tokens": 1, "keepalive_ms": 50}
    with Server(_mock_spec(tmp_path, behaviour), tmp_path / "log.txt") as server:
        start = time.monotonic()
        with pytest.raises(ServerError, match="no complete answer within 2 s"):
            server.warmup(timeout_s=2)
        assert time.monotonic() - start < 8


# --- a port lost between its choice and the server's bind -----------------------------------------


@contextlib.contextmanager
def _stranger_once_started(port: int, log: Path, flag: Path, answers: bool):  # type: ignore[no-untyped-def]
    """Another process's listener on ``port``, bound after the server's start checked the port
    and before the server binds it (the window vLLM's 15 s of imports leave): once the server's
    log says it started, the stranger binds, then lets the server go on (``flag``)."""
    holder: list[object] = []

    def take() -> None:
        deadline = time.monotonic() + 30
        while "starting" not in (log.read_text() if log.exists() else ""):
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        if answers:  # it even answers the health URL with 200
            stranger = serve_stranger(port)
        else:
            stranger = socket.socket()
            stranger.bind(("127.0.0.1", port))
            stranger.listen()
        holder.append(stranger)
        flag.touch()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(timeout=30)
        for stranger in holder:
            if isinstance(stranger, http.server.HTTPServer):
                stranger.shutdown()
                stranger.server_close()
            else:
                stranger.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("answers", [False, True], ids=["bind-fails", "stranger-answers"])
def test_a_port_taken_before_the_server_binds_it_is_tried_again_on_another(
    tmp_path, caplog, answers
) -> None:
    """free_port's port is free when chosen and bound seconds later (vLLM: after 15 s of
    imports); another process can take it in between (CI's vLLM fault row once got an HTTP 400
    from a stranger's port). The start fails as a lost port, the server's bind error in its
    log or a stranger answering there; with ``relaunch`` it starts again on a fresh port."""
    flag = tmp_path / "bind-now"
    first = spec("late-bind")
    first.env["FAKE_BIND_AFTER"] = str(flag)
    relaunched: list[LaunchSpec] = []

    def relaunch() -> LaunchSpec:
        relaunched.append(spec("ok"))
        return relaunched[-1]

    log = tmp_path / "log.txt"
    with (
        _stranger_once_started(first.port, log, flag, answers),
        caplog.at_level("WARNING"),
        Server(first, log, relaunch=relaunch) as server,
    ):
        assert [server.spec] == relaunched and server.spec.port != first.port
        assert server.ready_seconds is not None
    assert "starting again on another port" in caplog.text
    assert f"port {first.port}" in caplog.text


def test_a_lost_port_the_user_chose_is_the_error(tmp_path) -> None:
    """Without ``relaunch`` (a port the user named), a lost port fails the start and says so."""
    flag = tmp_path / "bind-now"
    first = spec("late-bind")
    first.env["FAKE_BIND_AFTER"] = str(flag)
    log = tmp_path / "log.txt"
    lost = f"port {first.port} taken by another process"
    with (
        _stranger_once_started(first.port, log, flag, answers=False),
        pytest.raises(PortLostError, match=lost),
        Server(first, log),
    ):
        pass


def test_an_http_error_carries_the_servers_reason(tmp_path) -> None:
    """vLLM says in the body why it refused a request; urllib's error says only "Bad Request"."""

    class Refuses(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = b'{"error": {"message": "max_tokens is too large", "code": 400}}'
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    refuser = http.server.HTTPServer(("127.0.0.1", 0), Refuses)
    threading.Thread(target=refuser.serve_forever, daemon=True).start()
    try:
        server = Server(spec("ok", port=refuser.server_address[1]), tmp_path / "log.txt")
        with pytest.raises(ValueError, match="HTTP 400 Bad Request: .*max_tokens is too large"):
            server.chat("Hello!", max_tokens=8, timeout_s=10)
    finally:
        refuser.shutdown()
        refuser.server_close()
