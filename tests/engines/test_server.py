"""Server lifecycle on a stand-in process: readiness, early exit, timeout, ports, teardown."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import psutil
import pytest

from quantbench.engines.base import LaunchSpec
from quantbench.engines.ports import PortInUseError, check_port_free, free_port
from quantbench.engines.server import (
    Server,
    ServerError,
    ServerExitedError,
    ServerTimeoutError,
)

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
