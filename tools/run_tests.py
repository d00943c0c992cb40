"""Run the whole test suite as `make test` (and CI) do: in two phases, then one closing line.

1. Every test that measures no time against a tolerance, on two workers at once (pytest-xdist,
   one test file per worker at a time, so a file's module fixtures are built once): the
   pipeline's end-to-end run on one core while the rest goes by on the other. Most of the rest
   waits (on servers starting, scripted delays, subprocesses), so the two overlap well.
2. The tests marked ``timing`` (they hold a measured time or speed to a tolerance: the harness's
   clock against a scripted server's, quantbench against `vllm bench serve`, the machine's
   rates), alone, one after the other, so nothing else shares the cores while they measure.

Before either, the free disk where the tests write (the temporary folder and the repository) is
printed, and a disk too full for the suite stops it at once with what to free: a full disk fails
hundreds of tests at their first write, with errors that do not say why (one CI run did).

Then the counts of both phases on one line ("N passed, N failed"), and the slowest tests of the
run from the per-test profile (tests/conftest.py: wall and CPU seconds). Extra arguments go to
both pytest runs (`make test PYTEST_ARGS="-k report"`); a phase that selects no test is not a
failure.

    python tools/run_tests.py [pytest args...]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "build" / "test-artifacts" / "test-profile.jsonl"
NO_TESTS = 5  # pytest's exit code when it collected nothing
COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")
WORKERS = os.environ.get("QUANTBENCH_TEST_WORKERS", "2")
GIB = 1 << 30
# The pipeline's end-to-end run alone asks its preflight for about 5 GiB (the embedded model's
# base, merge and six variants, each also in DVC's cache: src/quantbench/preflight.py, an upper
# bound). Measured, the whole suite's files peaked at 4.4 GiB above what setup left (a fresh
# clone's CI at fbc2f29, `df` every 10 s); a CI run on a disk with 1.5 GiB free failed at once.
DISK_NEEDED = 6 * GIB


def disk_problem(places: dict[str, Path], needed: int = DISK_NEEDED) -> str | None:
    """Print the free space of each place; a line naming what is short, or None."""
    short = []
    for what, place in places.items():
        free = shutil.disk_usage(place).free
        print(f"disk: {free / GIB:.1f} GiB free for {what} ({place})", flush=True)
        if free < needed:
            short.append(f"{what} ({place}: {free / GIB:.1f} GiB free)")
    if not short:
        return None
    return (
        f"the test suite needs {needed / GIB:.0f} GiB of free disk, short for "
        + ", ".join(short)
        + "; free space there (old pytest-of-* folders in the temporary folder, old clones and "
        "runs) or point TMPDIR at a bigger disk"
    )


def phase(
    name: str, args: list[str], env: dict[str, str] | None = None
) -> tuple[int, dict[str, int], float]:
    """Run one pytest; (exit code, counts from its closing line, seconds)."""
    print(f"\n=== {name}: pytest {' '.join(args)}", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "QUANTBENCH_TEST_PROFILE": str(PROFILE), **(env or {})},
    )
    last = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
        if line.strip():
            last = line
    code = proc.wait()
    counts: dict[str, int] = {}
    for n, what in COUNTS.findall(last):
        key = "errors" if what.startswith("error") else what
        counts[key] = counts.get(key, 0) + int(n)
    return code, counts, time.monotonic() - started


def slowest(limit: int = 30) -> list[str]:
    if not PROFILE.is_file():
        return []
    rows = [json.loads(line) for line in PROFILE.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda r: -r["wall_s"])
    return [f"{r['wall_s']:8.1f}s wall {r['cpu_s']:8.1f}s cpu  {r['test']}" for r in rows[:limit]]


def main(argv: list[str]) -> int:
    problem = disk_problem({"temporary files": Path(tempfile.gettempdir()), "the repository": REPO})
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        return 2
    PROFILE.parent.mkdir(parents=True, exist_ok=True)
    PROFILE.unlink(missing_ok=True)
    common = ["-p", "no:cacheprovider", *argv]
    # Phase 1's two workers share two cores: one thread each for the libraries that would start
    # one per core (torch, OpenMP, BLAS), or four spinning threads slow both workers down many
    # times (the pipeline's fine-tuning took 4 minutes instead of 20 s).
    one_thread = dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"), "1")
    # in collection order (tests/conftest.py puts the pipeline's run first), not xdist's default
    # of the files with the most tests first: the longest file must start first
    first = ["-n", WORKERS, "--dist", "loadfile", "--no-loadscope-reorder", "-m", "not timing"]
    phases = [
        ("phase 1, two workers", [*first, *common], one_thread),
        ("phase 2, timing tests alone", ["-m", "timing", *common], {}),
    ]
    total: dict[str, int] = {}
    failed = False
    for name, args, env in phases:
        code, counts, seconds = phase(name, args, env)
        print(f"=== {name}: exit {code} in {seconds:.0f} s", flush=True)
        for key, n in counts.items():
            total[key] = total.get(key, 0) + n
        failed = failed or code not in (0, NO_TESTS)
    print("\nslowest tests of the run (wall, CPU of the test and its finished children):")
    for line in slowest():
        print(line)
    failures = total.get("failed", 0) + total.get("errors", 0)
    extra = "".join(f", {total[k]} {k}" for k in ("skipped", "xfailed", "xpassed") if total.get(k))
    print(f"\n{total.get('passed', 0)} passed, {failures} failed{extra}")
    return 1 if failed or failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
