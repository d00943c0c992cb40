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
