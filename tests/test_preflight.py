"""The disk check of the preflight: a run that cannot fit its models on the disk is refused before
any work, with what is free, what the run needs and how to make room."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from quantbench import preflight
from quantbench.config import load_config
from quantbench.engines.memory import GIB


def test_the_embedded_models_weights_are_counted_at_16_bits() -> None:
    """SmolLM2-135M has 134.5 M parameters (its tied embedding counted once): 269 MB at 16 bits,
    read from the GGUF's tensor table, whatever type the file stores them in (Q4_1 here)."""
    config = load_config("params.yaml")
    weights = preflight.model_weight_bytes(config)
    assert weights is not None
    assert 2 * 134e6 <= weights <= 2 * 135e6, weights


def test_a_local_folder_counts_its_safetensors_as_stored(tmp_path: Path) -> None:
    config = load_config("params.yaml")
    (tmp_path / "model-00001.safetensors").write_bytes(b"\0" * 3000)
    (tmp_path / "model-00002.safetensors").write_bytes(b"\0" * 1000)
    (tmp_path / "tokenizer.json").write_bytes(b"\0" * 500)  # not weights
    local = config.model_copy(
        update={"model": config.model.model_copy(update={"source": "local", "path": tmp_path})}
    )
    assert preflight.model_weight_bytes(local) == 4000
    empty = local.model_copy(
        update={"model": local.model.model_copy(update={"path": tmp_path / "none"})}
    )
    assert preflight.model_weight_bytes(empty) is None  # the model check says what is missing


def test_too_little_disk_is_refused_with_what_is_free_what_is_needed_and_the_fix() -> None:
    config = load_config("params.yaml")
    weights = preflight.model_weight_bytes(config)
    assert weights is not None
    needed = preflight.disk_needed(config, weights, Path("/x"))
    # the base, the merge and each variant, in the workspace and in DVC's cache, and headroom
    assert needed == 2 * (2 + len(config.variants)) * weights + preflight.DISK_HEADROOM
    assert preflight.disk_problems(config, free=needed, where=Path("/x")) == []
    (problem,) = preflight.disk_problems(config, free=needed - 1, where=Path("/x"))
    assert problem.startswith("disk: ") and "free on /x" in problem
    assert f"{needed / GIB:.1f} GiB" in problem
    assert f"{len(config.variants)} variants" in problem and "dvc gc" in problem


def test_models_already_built_are_not_asked_for_again(tmp_path: Path) -> None:
    """A rerun after a full run (a report setting changed) writes no model: it asks for the
    headroom only, not for a second copy of what is on the disk already."""
    config = load_config("params.yaml")
    weights = preflight.model_weight_bytes(config)
    assert weights is not None
    full = preflight.disk_needed(config, weights, tmp_path)
    (tmp_path / "models/base").mkdir(parents=True)
    (tmp_path / "models/merged").mkdir()
    assert preflight.disk_needed(config, weights, tmp_path) == full - 2 * 2 * weights
    for name in config.variants:
        (tmp_path / "models/variants" / name).mkdir(parents=True)
    assert preflight.disk_needed(config, weights, tmp_path) == preflight.DISK_HEADROOM
    assert preflight.disk_problems(config, free=2 * preflight.DISK_HEADROOM, where=tmp_path) == []


def test_the_preflight_reports_a_full_disk_among_its_problems(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through `check`, as `quantbench validate` and the prepare stage call it."""
    config = load_config("params.yaml")
    real = shutil.disk_usage
    monkeypatch.setattr(
        preflight.shutil, "disk_usage", lambda p: real(p)._replace(free=512 * 1024**2)
    )
    with pytest.raises(preflight.PreflightError, match=r"disk: 0\.5 GiB free on "):
        preflight.check(config)
