"""`python -m faults` (`make faults`): inject every fault, print the table.

Exit status 1 when a row fails or a bad-input check is missing (an input accepted silently).
Each scenario's own output (server logs, progress lines) goes to <workdir>/<key>.log.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from faults.catalogue import (
    GROUP_TITLES,
    SCENARIOS,
    figures,
    format_markdown,
    format_table,
    run_all,
    summary_lines,
    to_json,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults", description=__doc__)
    parser.add_argument("--only", help="comma-separated scenario keys (see --list)")
    parser.add_argument("--group", help=f"comma-separated groups: {', '.join(GROUP_TITLES)}")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--workdir", type=Path, help="keep every scenario's files here")
    args = parser.parse_args(argv)
    scenarios = SCENARIOS
    if args.only:
        keys = set(args.only.split(","))
        unknown = keys - {s.key for s in SCENARIOS}
        if unknown:
            parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
        scenarios = [s for s in scenarios if s.key in keys]
    if args.group:
        groups = set(args.group.split(","))
        scenarios = [s for s in scenarios if s.group in groups]
    if args.list:
        for s in scenarios:
            print(f"{s.key:<22} {s.group:<9} {s.fault}")
        return 0
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
    )
    root = args.workdir or Path(tempfile.mkdtemp(prefix="qb-faults-"))
    try:
        results = run_all(scenarios, root, progress=sys.stdout)
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(format_markdown(results) if args.markdown else format_table(results))
    print()
    for line in summary_lines(figures(results)):
        print(line)
    if args.workdir is not None:
        print(f"files and logs of every scenario: {root}")
    if args.json is not None:
        args.json.write_text(to_json(results), encoding="utf-8")
    failing = {"fail", "missing"}
    return 1 if any(r.outcome.status in failing for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
