"""What the installed environment must hold for the pipeline's own tools to run at speed."""

from __future__ import annotations

import time
from pathlib import Path

from dvc.utils.serialize._yaml import parse_yaml
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]


def test_dvc_reads_its_files_with_ruamels_c_loader() -> None:
    """DVC reads dvc.lock (12,000 lines: every stage's code dependencies with their hashes) with
    ruamel.yaml's safe loader, in pure Python unless ruamel.yaml.clib is installed: 3.0 s a read
    on an AVX2-only EPYC, where `dvc status` took 8.9 s; 0.7 s and 4.7 s with it."""
    assert YAML(typ="safe").Parser.__name__ == "CParser"
    text = (REPO / "dvc.lock").read_text()
    start = time.perf_counter()
    lock = parse_yaml(text, "dvc.lock")
    seconds = time.perf_counter() - start
    assert "stages" in lock and len(lock["stages"]) >= 10
    print(f"dvc.lock ({len(text) // 1024} KiB) read in {seconds:.2f} s")
