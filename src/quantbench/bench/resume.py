"""Nothing finished is lost: a bench stage's finished points survive an interruption or a crash.

A bench stage measures for minutes; DVC keeps its output only when the stage completes, and
removes it before running the stage again. So every point is measured into a store outside the
stage's outputs (``.quantbench/partial/bench/<pair>/<key>/``), its row written there the moment it
is finished. The key is a hash of everything that makes a point's measurement what it is (the
engine and its settings, the variant's files, the workloads' traffic, the SLOs, the bench
settings, the environment fingerprint, quantbench's own code): a rerun with the same key reuses
every finished point (a server setting whose points are all done is not even started again), a
run with another key starts afresh and removes the stale store. When the stage completes, the
store is copied into the stage's output and removed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import quantbench
from quantbench.schemas import io as schema_io
from quantbench.schemas.machine import PairCalibration

ROOT = Path(".quantbench/partial/bench")
ROW = "row.json"
SERVER = "server.json"
TASK = "served_task.json"
PROBE = "probe.partial.json"


def fingerprint(parts: dict[str, Any]) -> str:
    """A short, stable hash of a JSON-able description of the measurement."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def code_hash(package_dir: Path | None = None) -> str:
    """A hash of quantbench's own source: points measured by other code are never reused."""

    root = package_dir or Path(quantbench.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class PartialStore:
    """The finished points of one pair under one key."""

    def __init__(self, pair: str, key: str, root: Path = ROOT) -> None:
        self.base = root / pair
        self.folder = self.base / key
        self.key = key

    def open(self) -> int:
        """Remove stores of other keys (stale); return how many points this one already holds."""
        if self.base.is_dir():
            for other in self.base.iterdir():
                if other != self.folder:
                    shutil.rmtree(other, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        return sum(1 for _ in self.folder.rglob(ROW))

    def server_dir(self, server: str) -> Path:
        return self.folder / server

    def point_dir(self, server: str, workload: str, load: str) -> Path:
        return self.folder / server / workload / load

    def row(self, server: str, workload: str, load: str) -> dict[str, Any] | None:
        """The finished row of this point, or None."""
        path = self.point_dir(server, workload, load) / ROW
        try:
            return dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def save_row(self, server: str, workload: str, load: str, row: dict[str, Any]) -> None:
        folder = self.point_dir(server, workload, load)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{ROW}.tmp"
        tmp.write_text(json.dumps(row, default=str), encoding="utf-8")
        tmp.replace(folder / ROW)  # a point is finished only once its row is complete

    def server(self, server: str) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self.server_dir(server) / SERVER).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def save_server(self, server: str, info: dict[str, Any]) -> None:
        folder = self.server_dir(server)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SERVER).write_text(json.dumps(info, default=str), encoding="utf-8")

    def task(self) -> dict[str, Any] | None:
        """The pair's served task, scored by an earlier run under this key, or None."""
        try:
            return dict(json.loads((self.folder / TASK).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def save_task(self, task: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / TASK).write_text(json.dumps(task, default=str), encoding="utf-8")

    def probe(self, pair: str) -> PairCalibration | None:
        """The pair's probe, made by an earlier run under this key, or None."""
        path = self.folder / PROBE
        if not path.is_file():
            return None
        try:
            return schema_io.read(path, PairCalibration, pair=pair)
        except Exception:  # a probe cut short while written is probed again
            return None

    def save_probe(self, probe: PairCalibration) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        schema_io.write(self.folder / PROBE, probe)

    def copy_into(self, out_dir: Path) -> None:
        """Every finished point's files into the stage's output (rows and server notes left out:
        they are in its summary)."""
        for path in sorted(self.folder.rglob("*")):
            kept = path.name not in (ROW, SERVER, TASK, PROBE) and not path.name.startswith(".")
            if path.is_file() and kept:
                target = out_dir / path.relative_to(self.folder)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)

    def close(self) -> None:
        """The stage completed: the store is no longer needed."""
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.base.is_dir() and not any(self.base.iterdir()):
            self.base.rmdir()
