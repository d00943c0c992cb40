"""The experiments to gather: pulled from a git remote, found by their refs, read at their commits.

An experiment is a git commit under ``refs/exps/`` (``dvc exp push`` puts it on the git remote,
its outputs in the DVC remote; ``dvc exp pull`` brings both back). Its files are read at that
commit through DVC's own filesystem, so a DVC-tracked output comes from the cache it was pulled
into, exactly as that experiment wrote it, without checking anything out.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantbench.errors import UserError

# refs DVC keeps for its own bookkeeping (running and queued experiments), not results
INTERNAL = ("refs/exps/exec/", "refs/exps/celery/", "refs/exps/runs/", "refs/exps/temp/")


class GatherError(UserError):
    """Nothing to gather, or the experiments could not be fetched."""


@dataclass(frozen=True)
class Experiment:
    name: str
    sha: str
    baseline: str  # the commit the experiment was run from


def dvc_command() -> list[str]:
    """DVC of this interpreter's environment (the project pins it), as a command."""
    return [sys.executable, "-m", "dvc"]


def pull(root: Path, remote: str) -> None:
    """Every experiment on ``remote`` (a git remote name or URL), with its outputs from the
    project's default DVC remote."""
    done = subprocess.run(
        [*dvc_command(), "exp", "pull", "--all-commits", "--force", remote],
        cwd=root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise GatherError(
            f"`dvc exp pull --all-commits {remote}` failed (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr).strip()[-2000:]}\n"
            "check the git remote's name (`git remote -v`) and that the DVC remote the "
            "experiments were pushed to is this project's default (`dvc remote list`)"
        )


def local_experiments(root: Path) -> list[Experiment]:
    """Every experiment this repository holds (its own and those pulled), oldest name first."""
    done = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps/"],
        cwd=root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise GatherError(f"{root} is not a git repository: {done.stderr.strip()}")
    found = []
    for line in done.stdout.splitlines():
        ref, _, sha = line.partition(" ")
        if ref.startswith(INTERNAL):
            continue
        parts = ref.split("/")  # refs/exps/<baseline[:2]>/<baseline[2:]>/<name>
        if len(parts) != 5:
            continue
        found.append(Experiment(name=parts[4], sha=sha, baseline=parts[2] + parts[3]))
    return sorted(found, key=lambda e: e.name)


class ExperimentFiles:
    """One experiment's files at its commit (git-tracked and DVC-tracked alike)."""

    def __init__(self, root: Path, experiment: Experiment) -> None:
        from dvc.api import DVCFileSystem

        self.experiment = experiment
        self.fs: Any = DVCFileSystem(str(root), rev=experiment.sha)

    def text(self, path: str) -> str | None:
        """The file's text, or None where the experiment has no such file (or its output was
        not pulled: DVC raises its own errors, all of them meaning "not here")."""
        try:
            return str(self.fs.read_text(path, encoding="utf-8"))
        except Exception:
            return None
