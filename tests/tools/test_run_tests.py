"""make test's runner: a disk too full for the suite stops it before any test, saying so."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools import run_tests


def test_the_free_disk_is_printed_and_enough_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_tests.disk_problem({"temporary files": tmp_path}, needed=1) is None
    out = capsys.readouterr().out
    assert f"GiB free for temporary files ({tmp_path})" in out


def test_a_full_disk_stops_the_suite_with_what_to_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = shutil.disk_usage
    monkeypatch.setattr(run_tests.shutil, "disk_usage", lambda p: real(p)._replace(free=1 << 30))
    problem = run_tests.disk_problem({"temporary files": tmp_path, "the repository": tmp_path})
    assert problem is not None
    assert problem.startswith("the test suite needs 6 GiB of free disk")
    assert f"temporary files ({tmp_path}: 1.0 GiB free)" in problem
    assert "the repository" in problem and "pytest-of-*" in problem
    # and main() returns before it runs any pytest
    monkeypatch.setattr(run_tests, "phase", lambda *a, **k: pytest.fail("a phase ran"))
    assert run_tests.main([]) == 2
    assert "error: the test suite needs" in capsys.readouterr().err
