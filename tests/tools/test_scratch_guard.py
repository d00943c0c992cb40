"""The check that a test run leaves no scratch output in the repository's tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools import scratch_guard


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".gitignore").write_text("/build/\n")
    (root / "kept.txt").write_text("tracked\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    return root


def test_a_file_left_in_the_tree_is_named_and_ignored_ones_are_not(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    before = scratch_guard.untracked(root)
    assert before == set()
    (root / "build").mkdir()
    (root / "build" / "scratch.json").write_text("{}")  # ignored: a build folder
    (root / "output-over-context").mkdir()
    (root / "output-over-context" / "params.yaml").write_text("x: 1\n")  # what was committed once
    (root / "kept.txt").write_text("changed\n")  # a tracked file changed: not scratch output
    after = scratch_guard.untracked(root)
    assert scratch_guard.left_behind(before, after) == ["output-over-context/params.yaml"]


def test_outside_a_git_checkout_there_is_nothing_to_compare(tmp_path: Path) -> None:
    assert scratch_guard.untracked(tmp_path) is None
    assert scratch_guard.left_behind(None, {"a"}) == []
