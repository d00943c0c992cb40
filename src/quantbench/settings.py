"""The one base of every settings model: what a user writes in params.yaml or on a command line.

Unknown keys are errors (a typo must not silently become a default), and settings are immutable
once validated (nothing downstream can change what was validated). Each package declares its own
section on this base (`lora/spec.py`, `engines/<engine>.py`, `workloads/spec.py`, ...); `config.py`
composes them into the whole file.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Settings(BaseModel):
    """Base for every settings model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
