"""Load from several hosts, for real: network namespaces built by the test (veth pairs on a bridge
of their own; addresses only inside them) hold the scripted server, the Locust master and two
workers, each a host with its own network stack, reachable only through that bridge.

Checked: the run's records are complete and account for every request as a one-process run does
against the same server; a worker without the run's token is refused; a worker killed mid-point
is reported and the records of the rest are kept. The same commands run across real machines
(docs/LOAD.md, "Load from several machines").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from quantbench.load.procs import TOKEN_ENV, child_env, stop_group
from quantbench.load.records import read_records
from quantbench.load.session import build_traffic, plan_point
from quantbench.mock_server import Behaviour, Script, read_log
from quantbench.workloads.plan import LoadPlan
from quantbench.workloads.spec import WorkloadSpec

pytestmark = [pytest.mark.server, pytest.mark.slow]

SUBNET = "10.213.{}.{}"
HOSTS = ("server", "master", "worker1", "worker2")
PORT, MASTER_PORT = 8000, 5557


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@dataclass
class Lan:
    """Four hosts (network namespaces) on one bridge, named ``<prefix>-<host>``."""

    prefix: str
    net: int

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def addr(self, host: str) -> str:
        return SUBNET.format(self.net, HOSTS.index(host) + 1)

    def start(self, host: str, module: str, args: list[str], **env: str) -> subprocess.Popen[str]:
        """``python -m module`` on ``host``: its own process group, stopped by its PID."""
        return subprocess.Popen(
            ["ip", "netns", "exec", self.ns(host), sys.executable, "-m", module, *args],
            env={**child_env(), **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip


@pytest.fixture
def lan() -> Iterator[Lan]:
    if os.geteuid() != 0:
        pytest.skip("building network namespaces needs root (ip netns add)")
    lan = Lan(prefix=f"qb{os.getpid()}", net=os.getpid() % 250 + 1)
    bridge = lan.ns("lan")
    made: list[str] = []
    try:
        for name in (bridge, *(lan.ns(h) for h in HOSTS)):
            done = _ip("netns", "add", name)
            if done.returncode != 0:
                pytest.skip(f"the kernel refused a network namespace: {done.stderr.strip()}")
            made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", bridge, "link", "set", "br0", "up")
        for i, host in enumerate(HOSTS):
            steps = (
                ("-n", bridge, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0",
                 "netns", lan.ns(host)),
                ("-n", bridge, "link", "set", f"v{i}", "master", "br0", "up"),
                ("-n", lan.ns(host), "addr", "add", f"{lan.addr(host)}/24", "dev", "eth0"),
                ("-n", lan.ns(host), "link", "set", "eth0", "up"),
            )  # fmt: skip
            for step in steps:
                done = _ip(*step)
                assert done.returncode == 0, (step, done.stderr)
        yield lan
    finally:
        for name in made:  # removing a namespace removes its veth ends and the bridge
            _ip("netns", "del", name)


def _serve(lan: Lan, tmp: Path, script: Script) -> subprocess.Popen[str]:
    (tmp / "script.json").write_text(script.model_dump_json())
    server = lan.start("server", "quantbench.mock_server", [
        "--host", lan.addr("server"), "--port", str(PORT), "--script", str(tmp / "script.json"),
        "--log", str(tmp / "truth.jsonl"),
    ])  # fmt: skip
    assert server.stdout is not None
    line = server.stdout.readline()
    assert line.startswith("listening on "), line
    return server


def _plan(lan: Lan, tmp: Path, workers: int, requests: int, name: str) -> Path:
    spec = WorkloadSpec.model_validate({
        "prompts": {"source": "random", "input_len": 8, "output_len": 6, "num_prompts": 64},
        "load": [{"kind": "concurrency", "concurrency": 4}], "num_requests": requests,
        "warmup_requests": 2, "workers": workers,
    })  # fmt: skip
    plan: LoadPlan = plan_point(
        spec, 0, build_traffic(spec, None), url=f"http://{lan.addr('server')}:{PORT}",
        model="mock-model", engine="mock", headers={},
    )  # fmt: skip
    path = tmp / f"plan-{name}.json"
    plan.save(path)
    return path


def _master(
    lan: Lan, plan: Path, records: Path, workers: int, token: str, wait_s: float = 30
) -> subprocess.Popen[str]:
    return lan.start("master", "quantbench.load.runner", [
        "master", "--plan", str(plan), "--records", str(records), "--workers", str(workers),
        "--bind-host", lan.addr("master"), "--bind-port", str(MASTER_PORT),
        "--wait-workers-s", str(wait_s),
    ], **{TOKEN_ENV: token})  # fmt: skip


def _worker(lan: Lan, host: str, token: str | None) -> subprocess.Popen[str]:
    args = ["worker", "--master-host", lan.addr("master"), "--master-port", str(MASTER_PORT)]
    return lan.start(host, "quantbench.load.runner", args, **{TOKEN_ENV: token or ""})


def _finish(proc: subprocess.Popen[str], timeout_s: float = 120) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        stop_group(proc)
    return proc.returncode, out or ""


def _accounting(records: list) -> dict:  # type: ignore[type-arg]
    counted = [r for r in records if r.phase != "cooldown"]
    return {
        "by phase": Counter(r.phase for r in counted),
        "by status": Counter(r.status for r in counted),
        "indexes": sorted(r.index for r in counted),
        "output tokens": sum(r.output_tokens or 0 for r in counted if r.status == "completed"),
    }


def test_a_master_and_two_workers_on_other_hosts_account_as_one_process(lan, tmp_path) -> None:
    server = _serve(
        lan, tmp_path, Script(behaviours=[Behaviour(ttft_ms=10, itl_ms=5, output_tokens=6)])
    )
    try:
        # each host's only route is the bridge's subnet: its traffic goes nowhere else
        for host in HOSTS:
            routes = _ip("-n", lan.ns(host), "route", "show").stdout.strip().splitlines()
            assert routes == [f"{SUBNET.format(lan.net, 0)}/24 dev eth0 proto kernel scope link "
                              f"src {lan.addr(host)}"], routes  # fmt: skip
        one = tmp_path / "one.jsonl"
        local = lan.start("master", "quantbench.load.runner", [
            "local", "--plan", str(_plan(lan, tmp_path, 0, 24, "one")), "--records", str(one),
        ])  # fmt: skip
        code, out = _finish(local)
        assert code == 0, out
        token = "t-" + os.urandom(8).hex()
        many = tmp_path / "many.jsonl"
        master = _master(lan, _plan(lan, tmp_path, 2, 24, "many"), many, 2, token)
        workers = [_worker(lan, host, token) for host in ("worker1", "worker2")]
        code, out = _finish(master)
        for w in workers:
            stop_group(w)
        assert code == 0, out
    finally:
        stop_group(server)
    alone, spread = read_records(one), read_records(many)
    # every request accounted for as the one-process run accounts for it
    assert _accounting(spread) == _accounting(alone)
    assert _accounting(spread)["by status"] == {"completed": 26}
    # by both workers, each from its own host, every one seen by the server
    assert Counter(r.worker for r in spread if r.phase != "cooldown") == {0: 13, 1: 13}
    truth = {t["request_id"] for t in read_log(tmp_path / "truth.jsonl")}
    assert {r.request_id for r in spread} <= truth


def test_a_worker_without_the_token_is_refused_across_hosts(lan, tmp_path) -> None:
    # the master waits for a worker with the token; the stranger connects within seconds
    master = _master(
        lan, _plan(lan, tmp_path, 1, 4, "t"), tmp_path / "r.jsonl", 1, "right-token", wait_s=12
    )
    stranger = _worker(lan, "worker1", None)
    code, out = _finish(master, timeout_s=60)
    stop_group(stranger)
    assert code != 0
    # connected, the stranger is not counted: the master never had a worker it could trust
    assert "0 of 1 workers connected" in out and "with this run's token" in out, out
    assert not (tmp_path / "r.jsonl").exists() or read_records(tmp_path / "r.jsonl") == []


def test_a_worker_killed_mid_point_is_reported_and_the_rest_kept(lan, tmp_path) -> None:
    server = _serve(
        lan, tmp_path, Script(behaviours=[Behaviour(ttft_ms=20, itl_ms=40, output_tokens=8)])
    )
    try:
        token = "t-" + os.urandom(8).hex()
        records = tmp_path / "r.jsonl"
        master = _master(lan, _plan(lan, tmp_path, 2, 200, "kill"), records, 2, token)
        first, second = (_worker(lan, host, token) for host in ("worker1", "worker2"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until requests are flowing
            if len(read_log(tmp_path / "truth.jsonl")) >= 8:
                break
            time.sleep(0.2)
        killed_at = time.monotonic()
        os.kill(second.pid, signal.SIGKILL)  # by its PID, on its host
        code, out = _finish(master)
        stop_group(first)
        stop_group(second)
    finally:
        stop_group(server)
    assert code != 0 and "a worker went missing" in out, out
    # what both sent before the kill is kept: the killed worker's records (streamed back until
    # then) all started before it died, and the survivor's went on after (one clock: the hosts
    # share this machine's monotonic clock). Which of the two got index 0 is the master's choice.
    by_worker: dict[int, list] = {}  # type: ignore[type-arg]
    for r in read_records(records):
        by_worker.setdefault(r.worker, []).append(r)
    assert len(by_worker) == 2, Counter(r.worker for rs in by_worker.values() for r in rs)
    last_sent = {w: max(r.send_time for r in rs) for w, rs in by_worker.items()}
    dead, alive = sorted(last_sent, key=last_sent.__getitem__)
    assert last_sent[dead] <= killed_at < last_sent[alive], (last_sent, killed_at)
