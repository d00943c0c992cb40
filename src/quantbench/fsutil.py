"""File-system helpers: content hashes and all-or-nothing outputs.

A DVC stage must write all of its outputs or none: if a stage dies half-way, a folder that looks
complete would be taken as a result. So outputs are built in a temporary sibling and renamed into
place only when complete (a rename within one file system is atomic).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_hashes(root: str | Path, pattern: str = "*") -> dict[str, str]:
    """Each matching file below root, by its path relative to root, with its content's hash."""
    root = Path(root)
    paths = sorted(p for p in root.rglob(pattern) if p.is_file())
    return {path.relative_to(root).as_posix(): sha256_file(path) for path in paths}


def tree_digest(hashes: dict[str, str]) -> str:
    """One hash over a folder's :func:`file_hashes`: relative paths and contents, sorted."""
    digest = hashlib.sha256()
    for name in sorted(hashes):
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(hashes[name].encode())
        digest.update(b"\n")
    return digest.hexdigest()


def sha256_tree(root: str | Path, pattern: str = "*") -> str:
    """One hash over every matching file below root: relative paths and contents, in sorted order."""
    return tree_digest(file_hashes(root, pattern))


def tree_size(root: str | Path) -> int:
    """Bytes on disk of every file below root (or of root itself when it is a file)."""
    root = Path(root)
    if root.is_file():
        return root.stat().st_size
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove the temporary siblings (``.<name>.tmp-<pid>``) of ``target`` that a killed run left
    behind (their process is gone); a live process's own is left alone."""
    removed = []
    for tmp in target.parent.glob(f".{target.name}.tmp-*"):
        pid_text = tmp.name.rsplit("-", 1)[-1]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and _alive(int(pid_text)):
            continue
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder that replaces `target` only if the block completes.

    Temporary folders a killed run left beside the target are removed first: they are never
    taken for outputs (their names start with a dot) and must not pile up."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists():
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    tmp.rename(target)


def copy_checkout(
    repo: Path, dest: Path, links: Sequence[str] = (".venv", ".venv-vllm", "build")
) -> None:
    """The files git tracks in ``repo``, as they are in its working tree, copied to ``dest``, and
    ``links`` (installed environments, the llama.cpp build) linked rather than copied: a scratch
    project that runs as the original does without writing into it (the pipeline test, the
    benchmarks that run stages)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        src = repo / name.decode()
        if src.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    for link in links:
        if (repo / link).exists():
            (dest / link).symlink_to((repo / link).resolve())


def write_json(path: str | Path, data: Any) -> None:
    """Write JSON atomically (temp file + rename), sorted and indented so diffs read well."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
