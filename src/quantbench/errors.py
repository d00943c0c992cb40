"""The error users act on: bad input or an unmet precondition, with a message saying the fix.

Stage scripts print these as one clear message (no traceback) and exit with status 2; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class UserError(Exception):
    """Something the user can fix: the message names what is wrong and how to fix it."""


def run_main(main: Callable[[], int | None]) -> None:
    """Run a command-line entry point, turning UserError into a clean message and exit code 2."""
    try:
        code = main()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code or 0)


def shown(value: object) -> str:
    """``value`` for a message: as it is where it prints plainly, else as Python writes it
    (quoted, with a newline as ``\\n``), so a control character in a path or a name is seen."""
    text = str(value)
    if text.isprintable() and text == text.strip():
        return text
    return repr(text)


REDACTED = "***"  # what a hidden secret shows as, everywhere (quantbench.secrets)


def mask_assignments(value: object) -> object:
    """``value`` with the part after ``=`` of every ``NAME=value`` text hidden (lists and tuples
    walked): for messages about entries that should have been names alone (``secret_env``)."""
    if isinstance(value, str):
        name, eq, _ = value.partition("=")
        return f"{name}={REDACTED}" if eq else value
    if isinstance(value, list | tuple):
        return [mask_assignments(v) for v in value]
    return value
