"""The repository holds the project, not a run's or a test's scratch output.

A fault scenario run with ``--workdir .`` once left its project copy (data and a params file) at
the top of the repository, and it was committed. Every tracked top-level entry must be one the
design names (docs/ARCHITECTURE.md), and no project copy (a second params.yaml, a copy of data/)
may be tracked anywhere else."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOP_LEVEL = {
    ".ci", ".dvc", ".dvcignore", ".gitignore", "Makefile", "README.md", "benchmarks",
    "constraints-vllm.txt", "constraints.txt", "data", "docs", "dvc.lock", "dvc.yaml", "faults",
    "imports",
    "params.yaml", "plugins", "profiles", "pyproject.toml", "reports", "requirements-dev.txt",
    "requirements-cuda.txt", "requirements-nodeps.txt", "requirements-vllm-cuda.txt",
    "requirements-vllm.txt", "requirements.txt", "src", "stages",
    "tests", "tools",
}  # fmt: skip


def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in out.split("\0") if name]


def stray(names: list[str]) -> list[str]:
    """Top-level entries the design does not name."""
    return sorted({name.split("/")[0] for name in names} - TOP_LEVEL)


def project_copies(names: list[str]) -> list[str]:
    """Tracked files that belong to a copy of the project (its params file, its data)."""
    return [
        name
        for name in names
        if name != "params.yaml"
        and (name.endswith("/params.yaml") or "/data/train.jsonl" in name)
        and not name.startswith(("tests/", "profiles/"))
    ]


def test_every_top_level_entry_is_part_of_the_design() -> None:
    assert not stray(tracked()), "tracked top-level entries that are no part of the design"


def test_no_project_copy_is_tracked() -> None:
    assert not project_copies(tracked()), "a project copy (a run's scratch output) is tracked"


def test_the_checks_catch_the_copy_they_were_made_after() -> None:
    names = [*tracked(), "output-over-context/project/params.yaml",
             "output-over-context/project/data/train.jsonl"]  # fmt: skip
    assert stray(names) == ["output-over-context"]
    assert len(project_copies(names)) == 2
