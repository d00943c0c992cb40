"""Running `dvc repro` in a scratch project from a test: the environment, one command, and a
timed repro that streams its log and writes each stage's wall time beside it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def dvc_env() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def dvc(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args],
        cwd=cwd, env=dvc_env(), capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def dvc_repro_timed(cwd: Path, timeout: float, log: Path) -> int:
    """`dvc repro` with its output streamed to ``log``, each line stamped with the seconds since
    the start, and each stage's wall time written beside it (``<log>.stages.tsv``): where the
    pipeline's time goes in CI, per stage, on whatever CPU CI had."""
    started = time.monotonic()
    stages: list[tuple[str, float]] = []
    proc = subprocess.Popen(
        [sys.executable, "-m", "dvc", "repro"], cwd=cwd, env=dvc_env(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    timer = threading.Timer(timeout, proc.kill)  # a hung stage fails the test, not CI's clock
    timer.start()
    try:
        with log.open("w") as out:
            assert proc.stdout is not None
            for line in proc.stdout:
                at = time.monotonic() - started
                out.write(f"[{at:7.1f}] {line}")
                if line.startswith("Running stage '"):
                    stages.append((line.split("'")[1], at))
        code = proc.wait()
    finally:
        timer.cancel()
    end = time.monotonic() - started
    bounds = [at for _, at in stages[1:]] + [end] if stages else []  # none: failed before any
    rows = [f"{name}\t{until - at:.1f}" for (name, at), until in zip(stages, bounds, strict=True)]
    log.with_suffix(".stages.tsv").write_text("stage\tseconds\n" + "\n".join(rows) + "\n")
    return code
