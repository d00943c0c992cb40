"""What a fault scenario is, how one runs, and how the leftovers of a run are found.

A scenario sets a fault up, injects it, and checks the outcome; it returns an :class:`Outcome`
with what was observed and the figures the summary adds up (requests recorded, orphans, results
lost). Every process a scenario starts inherits an environment variable holding the scenario's
tag, so whatever is still alive afterwards can be found by that tag: those are the orphans. The
runner kills any it finds (by PID, they are ours) and fails the scenario.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import psutil

TAG_VAR = "QUANTBENCH_FAULT_TAG"

Status = Literal["pass", "fail", "missing"]
"""pass: the expected outcome was observed; fail: it was not; missing: a bad-input check that
the project does not perform (reported as MISSING, and it fails the run like a FAIL)."""

Group = Literal["server", "pipeline", "input", "safety"]


@dataclass
class Outcome:
    status: Status
    observed: str
    requests: int = 0
    """Request records written by the run (every one with a status; failed ones with a reason)."""
    failed_requests: int = 0
    orphans: int = 0
    lost: int = 0
    """Results that existed before the fault but are missing from the outputs afterwards."""
    seconds: float = 0.0


@dataclass(frozen=True)
class Scenario:
    key: str
    group: Group
    fault: str
    injected: str
    """How the fault is injected (for the docs)."""
    expected: str
    run: Callable[[Context], Outcome]
    starts_processes: bool = True


@dataclass
class Context:
    """A scenario's working folder and process tag."""

    dir: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex)
    baseline: set[int] = field(default_factory=lambda: set(_zombie_children()))
    """Unreaped children that existed before the scenario (not its doing)."""

    @contextlib.contextmanager
    def tagged(self) -> Iterator[None]:
        """Children started inside inherit the tag (Server and the load harness copy os.environ)."""
        previous = os.environ.get(TAG_VAR)
        os.environ[TAG_VAR] = self.tag
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(TAG_VAR, None)
            else:
                os.environ[TAG_VAR] = previous

    def env(self, **extra: str) -> dict[str, str]:
        """A child's environment: the package and this tool (the repository root) importable."""
        from quantbench.load.procs import child_env

        env = child_env()
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join([root, *env.get("PYTHONPATH", "").split(os.pathsep)])
        return {**env, TAG_VAR: self.tag, **extra}

    def leftovers(self) -> list[psutil.Process]:
        """Live processes carrying this scenario's tag (ours excluded), and unreaped children."""
        found = []
        me = os.getpid()
        for proc in psutil.process_iter():
            if proc.pid == me:
                continue
            with contextlib.suppress(psutil.Error):
                if proc.status() == psutil.STATUS_ZOMBIE:
                    if proc.ppid() == me and proc.pid not in self.baseline:
                        found.append(proc)  # our child, never waited for
                    continue
                if proc.environ().get(TAG_VAR) == self.tag:
                    found.append(proc)
        return found

    def orphans(self, grace_s: float = 3.0) -> list[psutil.Process]:
        """Leftovers that are still there after `grace_s` (a killed process takes a moment)."""
        deadline = time.monotonic() + grace_s
        while True:
            found = self.leftovers()
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.1)


def _zombie_children() -> list[int]:
    pids = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if child.status() == psutil.STATUS_ZOMBIE:
                pids.append(child.pid)
    return pids


def describe(procs: list[psutil.Process]) -> str:
    parts = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            parts.append(f"{proc.pid} {' '.join(proc.cmdline())[:60]!r}")
    return ", ".join(parts) or f"{len(procs)} process(es)"


def kill_leftovers(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)


class Checks:
    """Collects the expectations a scenario did not meet."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def that(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return ok

    def outcome(self, observed: str, **figures: int) -> Outcome:
        if self.problems:
            return Outcome(
                "fail", f"{observed} | NOT AS EXPECTED: {'; '.join(self.problems)}", **figures
            )
        return Outcome("pass", observed, **figures)


def run_scenario(scenario: Scenario, root: Path) -> Outcome:
    """Run one scenario in `root/<key>`; an exception or a leftover process fails it."""
    ctx = Context(root / scenario.key)
    ctx.dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        outcome = scenario.run(ctx)
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        outcome = Outcome(
            "fail",
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
            f"(at {Path(where.filename).name}:{where.lineno})",
        )
    leftovers = ctx.orphans() if scenario.starts_processes else []
    if leftovers:
        outcome.status = "fail"
        outcome.observed += f" | LEFT BEHIND: {describe(leftovers)}"
        outcome.orphans = max(outcome.orphans, len(leftovers))
        kill_leftovers(leftovers)
    outcome.seconds = time.monotonic() - started
    return outcome
