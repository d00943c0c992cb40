"""Load processes forked from a template (quantbench.load.forkserver): the same process a fresh
start is, as the parent and the machine see it, without Locust's import at every point."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from quantbench.load import forkserver
from quantbench.load.forkserver import FORK_ENV, load_processes
from quantbench.load.procs import stop_group
from quantbench.load.session import Target, run_session
from quantbench.mock_server import Behaviour, MockServerProcess, Script
from quantbench.workloads.spec import WorkloadSpec

pytestmark = pytest.mark.server

RANDOM = {"source": "random", "input_len": 8, "output_len": 6}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[MockServerProcess]:
    srv = MockServerProcess(
        Script(behaviours=[Behaviour(ttft_ms=40, itl_ms=10, output_tokens=6)]), tmp_path / "srv"
    ).start()
    yield srv
    srv.stop()


def _spec(*concurrency: int, requests: int = 6) -> WorkloadSpec:
    return WorkloadSpec.model_validate({
        "prompts": RANDOM, "num_requests": requests, "warmup_requests": 0,
        "load": [{"kind": "concurrency", "concurrency": c} for c in concurrency],
        "progress_interval_s": 5.0,
    })  # fmt: skip


class Spawns:
    """Every process the harness starts with spawn_module, by its command's first argument."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.modes: list[str] = []
        real = forkserver.spawn_module

        def spawn(module: str, args: list[str], **kw):  # type: ignore[no-untyped-def]
            self.modes.append(args[0])
            return real(module, args, **kw)

        monkeypatch.setattr(forkserver, "spawn_module", spawn)


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children()
    except psutil.Error:
        return []


def test_a_sessions_points_fork_from_one_template_and_measure_as_fresh_processes(
    server: MockServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawns = Spawns(monkeypatch)
    target = Target(url=server.url, engine="mock")
    forked = run_session(_spec(1, 2, 3), target, tmp_path / "forked")
    assert spawns.modes == ["template"], spawns.modes  # one start for three points
    monkeypatch.setenv(FORK_ENV, "0")
    fresh = run_session(_spec(1, 2, 3), target, tmp_path / "fresh")
    assert spawns.modes == ["template", "local", "local", "local"], spawns.modes
    for a, b in zip(forked.points, fresh.points, strict=True):
        assert (a.point, a.requests, a.completed, a.failed) == (b.point, 6, 6, 0)
        assert a.total_output_tokens == b.total_output_tokens == 6 * 6
    # the point's own process measured itself (its CPU time and loop lag), as a fresh one does
    meta = (tmp_path / "forked" / "load_meta.json").read_text()
    assert '"client_cpu_s"' in meta and '"loop_lag"' in meta


def test_a_forked_load_process_is_a_process_of_its_own(
    server: MockServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = Target(url=server.url, engine="mock")
    seen: list[dict[str, object]] = []
    with load_processes():
        run_session(_spec(1), target, tmp_path / "first")  # the template starts here
        template = forkserver._local.template
        assert template is not None and template.proc.poll() is None
        # what the parent has when the point starts: another working directory and a stderr
        # opened after the template started (a stage's log, a test's capture)
        work = tmp_path / "elsewhere"
        work.mkdir()
        monkeypatch.chdir(work)
        log = tmp_path / "stderr.log"
        saved = os.dup(2)
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                for child in _children(template.proc.pid):
                    with contextlib.suppress(psutil.Error, OSError):
                        seen.append({
                            "pid": child.pid, "sid": os.getsid(child.pid),
                            "pgid": os.getpgid(child.pid), "cwd": child.cwd(),
                        })  # fmt: skip
                time.sleep(0.01)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            with log.open("w") as out:
                os.dup2(out.fileno(), 2)
                summary = run_session(_spec(2, requests=8), target, tmp_path / "second")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            stop.set()
            watcher.join()
        assert forkserver._local.template is template  # the same template, not a new start
    assert template.proc.poll() is not None  # stopped with its scope
    assert summary.points[0].completed == 8
    assert seen, "no forked load process was seen under the template"
    child = seen[-1]
    assert child["sid"] == child["pid"] == child["pgid"]  # its own session and process group
    assert child["sid"] != os.getsid(0)
    assert child["cwd"] == str(work)
    assert "[c2]" in log.read_text()  # its progress went to the parent's stderr of the moment


def test_a_changed_environment_starts_a_new_template(
    server: MockServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel shows a forked process the template's environment: anything finding processes by
    # a variable (the fault table's census) must find the load process under the new one.
    target = Target(url=server.url, engine="mock")
    with load_processes():
        run_session(_spec(1), target, tmp_path / "a")
        first = forkserver._local.template
        monkeypatch.setenv("QB_TEST_TAG", "census-me")
        run_session(_spec(1), target, tmp_path / "b")
        second = forkserver._local.template
        assert second is not first and first.proc.poll() is not None
        assert psutil.Process(second.proc.pid).environ().get("QB_TEST_TAG") == "census-me"


def test_a_stopped_point_gives_its_signal_and_the_template_goes_on(
    server: MockServerProcess, tmp_path: Path
) -> None:
    # Ctrl-C or a stage's stop: the point's group is stopped by its id; the run sees the signal as
    # a fresh process's exit code (session.INTERRUPTED_CODES), and the next point still forks.
    from quantbench.load.session import build_traffic, plan_point

    spec = _spec(1, requests=500)
    plan = plan_point(spec, 0, build_traffic(spec, None), url=server.url + "/v1", model="m",
                      engine="mock", headers={}, repeat=0, constraints=[], confidence=0.95)  # fmt: skip
    plan_path = tmp_path / "plan.json"
    plan.save(plan_path)
    argv = ["local", "--plan", str(plan_path), "--records", str(tmp_path / "r.jsonl")]
    with load_processes():
        proc = forkserver.start_local(argv)
        assert isinstance(proc, forkserver.ForkedProcess)
        time.sleep(1.0)
        assert proc.poll() is None
        assert stop_group(proc, timeout_s=5.0) == -signal.SIGTERM
        again = forkserver.start_local(argv)
        assert isinstance(again, forkserver.ForkedProcess) and again.pid != proc.pid
        assert stop_group(again, timeout_s=5.0) == -signal.SIGTERM


def test_a_parent_killed_mid_point_leaves_no_load_process(
    server: MockServerProcess, tmp_path: Path
) -> None:
    # `kill -9` of a bench stage: its template dies with it, and the forked point with the template
    script = textwrap.dedent(f"""
        from pathlib import Path
        from quantbench.load.session import Target, run_session
        from quantbench.workloads.spec import WorkloadSpec
        spec = WorkloadSpec.model_validate({{"prompts": {RANDOM!r}, "num_requests": 5000,
            "load": [{{"kind": "concurrency", "concurrency": 2}}]}})
        run_session(spec, Target(url={server.url!r}, engine="mock"), Path({str(tmp_path)!r}) / "o")
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "QB_KILLME": "1"})
    try:
        deadline = time.monotonic() + 60
        family: list[psutil.Process] = []
        while time.monotonic() < deadline:  # the template and the point it forked, both running
            family = psutil.Process(parent.pid).children(recursive=True)
            if len(family) >= 2:
                break
            time.sleep(0.05)
        assert len(family) >= 2, family
    finally:
        parent.kill()
        parent.wait()
    _, alive = psutil.wait_procs(family, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
