"""Scratch copies of a checkout (quantbench.fsutil.copy_checkout)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from quantbench.fsutil import copy_checkout


def test_a_scratch_copy_holds_what_git_tracks_and_links_the_environments(tmp_path: Path) -> None:
    repo, dest = tmp_path / "repo", tmp_path / "scratch"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "a.py").write_text("tracked, edited\n")
    (repo / "notes.txt").write_text("untracked\n")
    (repo / ".venv" / "bin").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "src/a.py"], cwd=repo, check=True)
    (repo / "src" / "a.py").write_text("tracked, edited after staging\n")  # the working tree's
    dest.mkdir()
    copy_checkout(repo, dest)
    assert (dest / "src" / "a.py").read_text() == "tracked, edited after staging\n"
    assert not (dest / "notes.txt").exists()
    assert (dest / ".venv").is_symlink() and (dest / ".venv").resolve() == (repo / ".venv")
    assert not (dest / "build").exists()  # a link only for what the checkout has
