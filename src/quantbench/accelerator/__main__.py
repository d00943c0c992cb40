"""``python -m quantbench.accelerator``: what was found, as one line or as JSON (``--json``)."""

from __future__ import annotations

import json
import sys

from quantbench.accelerator.nvidia import detect


def main(argv: list[str]) -> int:
    found = detect()
    print(json.dumps(found.as_dict(), indent=2) if "--json" in argv else found.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
