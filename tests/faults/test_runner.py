"""The fault runner itself: leftovers are found (the orphan check is not blind), exceptions fail a
row, the table and figures add up, and the exit status follows the rows."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest
from faults.catalogue import figures, format_markdown, format_table, run_all
from faults.scenario import Context, Outcome, Scenario, run_scenario

from faults import __main__ as cli
from faults import catalogue


def _scenario(key: str, run, group: str = "server", starts: bool = True) -> Scenario:  # type: ignore[no-untyped-def]
    return Scenario(key, group, f"fault {key}", "how", f"expected {key}", run, starts)  # type: ignore[arg-type]


@pytest.mark.server
def test_a_process_left_behind_fails_the_scenario_and_is_killed(tmp_path) -> None:
    started: list[int] = []

    def leaks(ctx: Context) -> Outcome:
        with ctx.tagged():
            proc = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(60)"],
                env=dict(os.environ),
                start_new_session=True,
            )
        started.append(proc.pid)
        return Outcome("pass", "looked fine", requests=3)

    outcome = run_scenario(_scenario("leak", leaks), tmp_path)
    assert outcome.status == "fail" and outcome.orphans == 1
    assert f"LEFT BEHIND: {started[0]}" in outcome.observed
    with pytest.raises(psutil.NoSuchProcess):
        proc = psutil.Process(started[0])
        if proc.status() == psutil.STATUS_ZOMBIE:
            os.waitpid(started[0], 0)  # it was our child: reap it, then it is gone
        psutil.Process(started[0]).status()


def test_an_exception_fails_the_row_with_where_it_happened(tmp_path) -> None:
    def boom(ctx: Context) -> Outcome:
        raise RuntimeError("server exploded")

    outcome = run_scenario(_scenario("boom", boom, starts=False), tmp_path)
    assert outcome.status == "fail"
    assert outcome.observed.startswith("RuntimeError: server exploded (at test_runner.py:")


def test_table_figures_and_exit_status(tmp_path, monkeypatch, capsys) -> None:
    rows = [
        _scenario(
            "ok", lambda ctx: Outcome("pass", "fine | really", requests=5, failed_requests=2)
        ),
        _scenario("todo", lambda ctx: Outcome("missing", "accepted"), group="input", starts=False),
    ]
    results = run_all(rows, tmp_path, quiet=False)
    f = figures(results)
    assert (f.faults, f.requests, f.failed_requests, f.passed, f.missing) == (2, 5, 2, 1, 1)
    table = format_table(results)
    assert "== server faults ==" in table and "== bad input ==" in table
    assert "PASS" in table and "MISSING" in table
    assert "fine \\| really" in format_markdown(results)

    monkeypatch.setattr(catalogue, "SCENARIOS", rows)
    monkeypatch.setattr(cli, "SCENARIOS", rows)
    assert cli.main([]) == 1  # a missing validation (an input accepted silently) fails the run
    out = capsys.readouterr().out
    assert "processes left behind: 0" in out and "missing from the outputs): 0" in out
    rows.append(_scenario("bad", lambda ctx: Outcome("fail", "wrong")))
    assert cli.main(["--only", "ok,bad"]) == 1


def test_every_scenario_has_a_unique_key_and_says_how_it_is_injected() -> None:
    keys = [s.key for s in catalogue.SCENARIOS]
    assert len(keys) == len(set(keys))
    assert all(s.injected and s.expected and s.fault for s in catalogue.SCENARIOS)
    groups = {s.group for s in catalogue.SCENARIOS}
    assert groups == {"server", "pipeline", "input", "safety"}
