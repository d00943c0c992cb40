"""What a run left in the repository's tree: files git neither tracks nor ignores.

A test (or a stage run by one) that writes its scratch output into the checkout instead of its
temporary folder leaves it there to be committed by the next `git add -A`: a fault scenario's
copy was once committed as a top-level folder. `make test` compares the untracked files before
and after each pytest session (tests/conftest.py) and fails the session that added any, naming
them.

    python tools/scratch_guard.py      # the untracked files now, one per line
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def untracked(root: Path = REPO) -> set[str] | None:
    """Paths (relative to ``root``) that git neither tracks nor ignores; None outside a git
    checkout (an unpacked release: nothing to compare)."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all", "-z"],
            cwd=root, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return {entry[3:] for entry in done.stdout.split("\0") if entry.startswith("?? ")}


def left_behind(before: set[str] | None, after: set[str] | None) -> list[str]:
    """Untracked files that appeared between the two snapshots."""
    if before is None or after is None:
        return []
    return sorted(after - before)


if __name__ == "__main__":
    print("\n".join(sorted(untracked() or ())))
    sys.exit(0)
