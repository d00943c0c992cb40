"""Each pipeline stage's wall time, from a run's output: how docs/RESULTS.md times a default run.

DVC prints "Running stage 'name':" as a stage starts and nothing when it ends, so the run's
output is stamped line by line as it is printed and a stage's time is from its line to the next
stage's (the last one's to the end of the output):

    make repro 2>&1 | python3 tools/stage_times.py --log build/repro.log

prints every line through as it comes, writes them stamped to ``--log``, and at the end prints
each stage's seconds, each kind's total (quantize, evaluate, bench, ...) and the whole run's.
``--read build/repro.log`` prints the table of a log written before. Standard library only:
it runs beside a run, before any environment exists.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path

STAGE = re.compile(r"Running stage '([^']+)'")


def stage_seconds(stamped: Iterable[tuple[float, str]]) -> tuple[list[tuple[str, float]], float]:
    """(stage, seconds) in run order, and the whole output's seconds, from (time, line) pairs."""
    starts: list[tuple[float, str]] = []
    first = last = None
    for at, line in stamped:
        first = at if first is None else first
        last = at
        if match := STAGE.search(line):
            starts.append((at, match.group(1)))
    if first is None or last is None:
        return [], 0.0
    ends = [at for at, _ in starts[1:]] + [last]
    return [(name, end - at) for (at, name), end in zip(starts, ends, strict=True)], last - first


def table(stages: list[tuple[str, float]], total: float) -> str:
    kinds: dict[str, float] = {}
    for name, seconds in stages:
        kind = name.split("@")[0]
        kinds[kind] = kinds.get(kind, 0.0) + seconds
    rows = [f"{name:40s} {seconds:8.1f}" for name, seconds in stages]
    rows.append("")
    rows += [f"{kind:40s} {seconds:8.1f}" for kind, seconds in kinds.items()]
    rows.append(f"{'whole output':40s} {total:8.1f}  ({total / 60:.1f} minutes)")
    return "\n".join(rows)


def _read(path: Path) -> list[tuple[float, str]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stamp, _, text = line.partition(" ")
        try:
            out.append((float(stamp), text))
        except ValueError:  # a line a program ended with a carriage return: part of the last
            continue
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, help="write the stamped lines here")
    parser.add_argument("--read", type=Path, help="a stamped log written before: its table")
    args = parser.parse_args(argv)
    if args.read is not None:
        print(table(*stage_seconds(_read(args.read))))
        return 0
    stamped = []
    sink = args.log.open("w", encoding="utf-8") if args.log else None
    try:
        for line in sys.stdin:
            at = time.time()
            stamped.append((at, line.rstrip("\n")))
            sys.stdout.write(line)
            sys.stdout.flush()
            if sink is not None:
                sink.write(f"{at:.1f} {line}")
                sink.flush()
    finally:
        if sink is not None:
            sink.close()
    print(table(*stage_seconds(stamped)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
