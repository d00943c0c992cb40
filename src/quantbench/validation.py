"""Validate the whole params file and what it points to: the config, then the preflight checks.

What `quantbench validate`, `make repro` and the `validate` stage run. The verdict it returns holds
nothing that changes with valid values (only the sections checked), so the stage's output stays
byte-identical across valid edits.
"""

from __future__ import annotations

from pathlib import Path

from quantbench import preflight
from quantbench.config import Config, load_config
from quantbench.schemas.validate import ValidationVerdict


def validate_config(path: str | Path) -> Config:
    """The validated config, after the preflight checks passed (raises UserError otherwise)."""
    config = load_config(path)
    preflight.check(config)
    return config


def validate_all(path: str | Path) -> ValidationVerdict:
    config = validate_config(path)
    return ValidationVerdict(sections=list(type(config).model_fields))
