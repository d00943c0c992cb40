"""Validate the whole params file and what it points to: the config, then the preflight checks.

What `quantbench validate`, `make repro` and the `validate` stage run. The verdict it returns holds
nothing that changes with valid values (only the sections checked), so the stage's output stays
byte-identical across valid edits.
"""

from __future__ import annotations

from pathlib import Path

from quantbench import checks, params, ports, preflight, secrets, settings
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


def checks_table() -> str:
    """docs/FAULTS.md's table of what validate checks: every registered check (reading the
    file, the settings, the preflight checks; importing this module registers them all)."""
    return checks.markdown_table(checks.registered([params, settings, secrets, ports]))


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="What `quantbench validate` checks.")
    parser.add_argument(
        "--checks", action="store_true", help="print docs/FAULTS.md's table of the checks"
    )
    args = parser.parse_args()
    if args.checks:
        print(checks_table())


if __name__ == "__main__":
    main()
