"""A sweep over two machines gathered into one report, through real git and DVC remotes.

Two clones of one project play two machines: each runs its share as a DVC experiment (its own
``bench.price_per_hour``; its fingerprint as its fingerprint stage would record it) and pushes it
to a shared bare git remote and a local DVC remote; a third clone gathers both with
``quantbench gather --remote origin``. The project is a stand-in whose one stage writes the
report stage's own outputs (built by the report stage from the report tests' fixture tree),
with the machine's CPU and speed from ``machine.yaml``: what is tested is gathering, not the
pipeline. A second test runs DVC's experiment queue on one machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import psutil
import pytest
import yaml
from tests.report.conftest import (
    FIXTURE_PROFILES,
    FIXTURE_SLO,
    FIXTURE_WORKLOADS,
    build_fixture_tree,
)
from tests.schemas import examples

from quantbench.cli.gather import run_gather
from quantbench.gather.experiments import GatherError
from quantbench.gather.machines import cost_per_million

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = ("env.json", "best_config.json", "report_metrics.json", "estimate/estimates.json")
IDENTITY = {
    "GIT_AUTHOR_NAME": "quantbench test", "GIT_AUTHOR_EMAIL": "test@quantbench.invalid",
    "GIT_COMMITTER_NAME": "quantbench test", "GIT_COMMITTER_EMAIL": "test@quantbench.invalid",
}  # fmt: skip

STAGE_SCRIPT = '''"""The stand-in for a machine's pipeline: the fixture's report, as this machine measured it."""
import json, pathlib, shutil, yaml
m = yaml.safe_load(open("machine.yaml"))
out = pathlib.Path("reports")
(out / "estimate").mkdir(parents=True, exist_ok=True)
env = json.load(open("fixture/env.json"))
env["cpu"].update(model=m["cpu"], logical_cores=m["cores"])
json.dump(env, open(out / "env.json", "w"))
best = json.load(open("fixture/best_config.json"))
for entry in best.values():
    figure = (entry.get("expected") or {}).get("good_output_throughput")
    if isinstance(figure, dict):
        for k in ("value", "low", "high"):
            figure[k] *= m["speed"]
json.dump(best, open(out / "best_config.json", "w"))
metrics = json.load(open("fixture/report_metrics.json"))
for per_workload in metrics["pairs"].values():
    for figures in per_workload.values():
        if figures.get("good_output_throughput") is not None:
            figures["good_output_throughput"] *= m["speed"]
json.dump(metrics, open(out / "report_metrics.json", "w"))
shutil.copy("fixture/estimates.json", out / "estimate" / "estimates.json")
'''


def _run(cmd: list[str], cwd: Path, timeout: float = 180) -> str:
    # the project's environment first on PATH, as where it is activated: DVC's queue starts
    # its workers as `dvc` from PATH
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, **IDENTITY, "DVC_NO_ANALYTICS": "1", "PATH": path}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, f"{' '.join(cmd)} in {cwd}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def dvc(cwd: Path, *args: str, timeout: float = 180) -> str:
    return _run([sys.executable, "-m", "dvc", *args], cwd, timeout)


def git(cwd: Path, *args: str) -> str:
    return _run(["git", *args], cwd)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A bare git remote, a DVC remote, and the project pushed to both (main, no experiment)."""
    base = tmp_path_factory.mktemp("gather")
    tree = build_fixture_tree(base / "tree")
    examples.estimates_file(tree, also=("L4",))  # a GPU the roofline estimates, nobody measured
    params = {
        "slo": FIXTURE_SLO,
        "workloads": {n: {"use": n, "num_requests": 40, "slo": s}
                      for n, s in FIXTURE_WORKLOADS.items()},
        "report": {"profiles": FIXTURE_PROFILES},
    }  # fmt: skip
    (tree / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    _run([sys.executable, str(REPO / "stages/report.py")], tree)
    remote, store, origin = base / "remote.git", base / "store", base / "origin"
    git(base, "init", "-q", "--bare", "--initial-branch=main", str(remote))
    store.mkdir()
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    (origin / "fixture").mkdir()
    for rel in OUTPUTS:
        shutil.copy(tree / "reports" / rel, origin / "fixture" / Path(rel).name)
    (origin / "params.yaml").write_text(
        yaml.safe_dump({**params, "bench": {"price_per_hour": 0.10, "currency": "USD"}}),
        encoding="utf-8",
    )
    (origin / "machine.yaml").write_text(
        yaml.safe_dump({"cpu": "AMD EPYC (machine a)", "cores": 2, "speed": 1.0}), encoding="utf-8"
    )
    (origin / "make_reports.py").write_text(STAGE_SCRIPT, encoding="utf-8")
    stage = {
        "cmd": f"{sys.executable} make_reports.py",
        "deps": ["make_reports.py", "fixture"],
        "params": ["bench.price_per_hour", {"machine.yaml": ["cpu", "cores", "speed"]}],
        "outs": [f"reports/{rel}" for rel in OUTPUTS],
    }
    (origin / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"machine": stage}}))
    dvc(origin, "init", "-q")
    dvc(origin, "config", "core.autostage", "true")
    dvc(origin, "remote", "add", "-d", "store", str(store))
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "a project to sweep")
    git(origin, "remote", "add", "origin", str(remote))
    git(origin, "push", "-q", "origin", "main")
    return {"base": base, "remote": remote, "origin": origin}


def clone(project: dict[str, Path], name: str) -> Path:
    where = project["base"] / name
    git(project["base"], "clone", "-q", str(project["remote"]), str(where))
    return where


def gather(repo: Path, **options: object) -> dict:
    args = Namespace(remote=None, exp=[], price=[], repo=repo, out=Path("reports/gathered"))
    for key, value in options.items():
        setattr(args, key, value)
    assert run_gather(args) == 0
    return json.loads((repo / "reports/gathered/gathered.json").read_text())


def test_two_machines_gathered_into_one_report(project: dict[str, Path]) -> None:
    # machine A: the slower, cheaper one; machine B six times faster at twice the price
    a, b = clone(project, "machine-a"), clone(project, "machine-b")
    dvc(a, "exp", "run", "-q", "-n", "on-a")
    dvc(b, "exp", "run", "-q", "-n", "on-b", "-S", "machine.yaml:cpu='Intel Xeon (machine b)'",
        "-S", "machine.yaml:speed=6", "-S", "bench.price_per_hour=0.2")  # fmt: skip
    for repo, name in ((a, "on-a"), (b, "on-b")):
        dvc(repo, "exp", "push", "origin", name)
    there = clone(project, "reviewer")
    found = gather(there, remote="origin", price=[("L4", 0.8)])

    machines = {m["fingerprint"]["cpu_model"]: m for m in found["machines"]}
    assert sorted(machines) == ["AMD EPYC (machine a)", "Intel Xeon (machine b)"]
    assert machines["AMD EPYC (machine a)"]["price_per_hour"] == 0.10
    assert machines["Intel Xeon (machine b)"]["price_per_hour"] == 0.2
    assert len({m["fingerprint"]["id"] for m in found["machines"]}) == 2
    assert [m["experiments"] for m in found["machines"]] == [["on-a"], ["on-b"]]
    fixture = json.loads((project["origin"] / "fixture/best_config.json").read_text())
    chat = next(w for w in found["workloads"] if w["workload"] == "chat")
    good = fixture["chat"]["expected"]["good_output_throughput"]
    rows = {r["best"]["experiment"]: r["best"] for r in chat["rows"]}
    for exp, price, speed in (("on-a", 0.10, 1.0), ("on-b", 0.2, 6.0)):
        cost = rows[exp]["cost_per_million"]
        assert rows[exp]["ranked_by"] == "good_output_throughput"
        assert cost["value"] == pytest.approx(cost_per_million(price, good["value"] * speed))
        assert cost["high"] == pytest.approx(cost_per_million(price, good["low"] * speed))
        assert rows[exp]["pair"] == fixture["chat"]["pair"]
    # six times the speed at twice the price: cheaper beyond the intervals' reach
    assert chat["cheapest"] == machines["Intel Xeon (machine b)"]["fingerprint"]["id"]
    assert "separable" in chat["verdict"] and "not separable" not in chat["verdict"]
    # a profile without latency limits ranks, and is priced, by all output tokens
    batch = next(w for w in found["workloads"] if w["workload"] == "chat:batch")
    assert batch["ranked_by"] == "output_throughput" and batch["cheapest"] is not None
    # the roofline's GPUs no machine measured, L4 priced from --price
    l4 = [e for e in found["estimated"] if e["hardware"] == "L4"]
    assert l4 and all(e["cost_per_million"] is not None for e in l4)

    summary = (there / "reports/gathered/summary.md").read_text()
    assert "| AMD EPYC (machine a), 2 cores |" in summary
    assert "| Intel Xeon (machine b), 2 cores |" in summary
    assert "## Workload chat" in summary and "## Hardware no machine here measured" in summary
    page = (there / "reports/gathered/index.html").read_text()
    assert "Intel Xeon (machine b)" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page


def test_experiments_queued_on_one_machine_are_one_machine(project: dict[str, Path]) -> None:
    """`dvc exp run --queue` and `dvc queue start` on one machine: two experiments, one
    fingerprint; its best configuration is the faster experiment's."""
    here = clone(project, "queue")
    for name, speed in (("q-slow", "1"), ("q-fast", "2")):
        dvc(here, "exp", "run", "--queue", "-q", "-n", name, "-S", f"machine.yaml:speed={speed}")
    started = time.monotonic()
    try:
        dvc(here, "queue", "start", "-j", "1")
        while True:
            status = dvc(here, "queue", "status")
            if "Queued" not in status and "Running" not in status:
                break
            assert time.monotonic() - started < 240, f"the queue never finished:\n{status}"
            time.sleep(1)
        assert status.count("Success") == 2, status
    finally:
        dvc(here, "queue", "stop", "--kill")
        _no_worker_left(here)
    found = gather(here)
    [machine] = found["machines"]
    assert sorted(machine["experiments"]) == ["q-fast", "q-slow"]
    assert {b["experiment"] for b in machine["best"] if b["status"] == "ranked"} == {"q-fast"}


def _no_worker_left(repo: Path) -> None:
    """DVC's queue workers run detached; none may outlive the test."""
    deadline = time.monotonic() + 30
    while True:
        left = []
        for proc in psutil.process_iter(["pid", "cwd", "cmdline"]):
            cwd = proc.info.get("cwd") or ""
            if cwd.startswith(str(repo)) and proc.pid != os.getpid():
                left.append(proc)
        if not left:
            return
        if time.monotonic() > deadline:
            for proc in left:
                proc.kill()
            pytest.fail(f"DVC queue processes left running: {[p.info['cmdline'] for p in left]}")
        time.sleep(0.5)


def test_nothing_to_gather_says_how_to_get_some(project: dict[str, Path]) -> None:
    empty = clone(project, "empty")
    with pytest.raises(GatherError, match="no experiments to gather.*--remote origin"):
        gather(empty)
    with pytest.raises(GatherError, match="no experiment named nope"):
        gather(empty, exp=["nope"])
