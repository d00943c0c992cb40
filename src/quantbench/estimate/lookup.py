"""Hardware by name: a datasheet GPU, a saved JSON, or this machine measured.

Above both ``estimate.hardware`` (the table and the spec) and ``estimate.machine`` (the
measurement), so that neither imports the other back.
"""

from __future__ import annotations

import json
from pathlib import Path

from quantbench.estimate import machine
from quantbench.estimate.errors import MissingInputError
from quantbench.estimate.hardware import THIS_MACHINE, check_hardware_name, table_entry
from quantbench.schemas.hardware import HardwareSpec


def resolve_hardware(
    name: str,
    threads: int | None = None,
    cache_dir: Path | None = None,
    remeasure: bool = False,
) -> HardwareSpec:
    """Look up a datasheet GPU, load a saved JSON, or measure (and cache) this machine."""
    check_hardware_name(name)
    if name.lower() == THIS_MACHINE:
        return machine.measured_this_machine(
            threads=threads, cache_dir=cache_dir, remeasure=remeasure
        )
    entry = table_entry(name)
    if entry is not None:
        return entry
    path = Path(name)
    if not path.is_file():
        raise MissingInputError(f"hardware file {path} does not exist")
    return HardwareSpec.model_validate(json.loads(path.read_text()))
