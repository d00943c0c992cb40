"""A stage script's ``main()`` run in the test process, on params.yaml with the test's own
``runtime.device``: what the tests of each stage's device choice drive (tests/*/test_device.py).

    def test_x(fake_gpu, monkeypatch, tmp_path):
        stage = load_stage("quantize", monkeypatch)
        run_stage(stage, monkeypatch, params_file(tmp_path, device="auto"), "--name", "w8a8")

The script's logging and thread setup are replaced (they would change this process's stderr
handlers, TERM and torch threads for every later test); its device setup is the real one.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from quantbench.accelerator.nvidia import DEVICE_ENV

REPO = Path(__file__).resolve().parents[1]


class Reached(Exception):
    """Raised where a test stops a stage: at the library's boundary, with what it was given."""

    def __init__(self, **seen: Any) -> None:
        super().__init__(seen)
        self.seen = seen


def load_stage(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``stages/<name>.py`` as a module (run from the repository root: its data paths are)."""
    spec = importlib.util.spec_from_file_location(f"stage_{name}", REPO / "stages" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(module, "setup_logging", lambda: None)
    if hasattr(module, "configure_threads"):
        monkeypatch.setattr(module, "configure_threads", lambda threads: None)
    return module


def params_file(tmp_path: Path, device: str, **sections: dict[str, Any]) -> Path:
    """The repository's params.yaml with ``runtime.device`` (and any section keys) replaced."""
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["runtime"]["device"] = device
    for name, values in sections.items():
        params[name] = {**params.get(name, {}), **values}
    out = tmp_path / "params.yaml"
    out.write_text(yaml.safe_dump(params), encoding="utf-8")
    return out


def run_stage(stage: ModuleType, monkeypatch: pytest.MonkeyPatch, params: Path, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", [f"{stage.__name__}.py", "--params", str(params), *argv])
    stage.main()


@pytest.fixture(autouse=True)
def device_env_kept() -> Iterator[None]:
    """A stage exports the device it resolved (``QUANTBENCH_DEVICE``) into this process's
    environment: put back what was there, whichever stand-in GPU fixture ran."""
    before = os.environ.get(DEVICE_ENV)
    yield
    if before is None:
        os.environ.pop(DEVICE_ENV, None)
    else:
        os.environ[DEVICE_ENV] = before
