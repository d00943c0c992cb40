"""Every fault scenario, in the order the table lists them, and the runner that prints it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from faults import inputs, real_engine, real_vllm, safety, server_faults
from faults.pipeline import dvc_interrupted
from faults.scenario import Outcome, Scenario, run_scenario

PIPELINE = [
    Scenario(
        f"dvc-{sig.name.lower()}",
        "pipeline",
        f"dvc repro interrupted ({'Ctrl-C, SIGINT' if sig == signal.SIGINT else 'SIGTERM'})",
        f"{sig.name} to dvc repro's process group while a benchmark stage (sigterm_as_interrupt + "
        "atomic_dir + run_pair) has its server under load",
        "no process left; the stage's output absent; the finished stage kept; the next dvc "
        "repro runs only the interrupted stage",
        dvc_interrupted(sig),
    )
    for sig in (signal.SIGINT, signal.SIGTERM)
]

SCENARIOS: list[Scenario] = [
    *[s for s in server_faults.SCENARIOS if s.group == "server"],
    *[s for s in real_engine.SCENARIOS if s.group == "server"],
    *[s for s in real_vllm.SCENARIOS if s.group == "server"],
    *PIPELINE,
    *[s for s in real_engine.SCENARIOS if s.group != "server"],
    *[s for s in real_vllm.SCENARIOS if s.group != "server"],
    *[s for s in server_faults.SCENARIOS if s.group != "server"],
    *inputs.SCENARIOS,
    *safety.SCENARIOS,
]

GROUP_TITLES = {
    "server": "server faults",
    "pipeline": "pipeline faults",
    "input": "bad input",
    "safety": "safety",
}
RESULT = {"pass": "PASS", "fail": "FAIL", "missing": "MISSING"}


@dataclass
class Result:
    scenario: Scenario
    outcome: Outcome


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Send this process's file descriptor 2 (and so its children's stderr) to a file."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_all(
    scenarios: Sequence[Scenario], root: Path, progress: TextIO | None = None, quiet: bool = True
) -> list[Result]:
    results = []
    for i, scenario in enumerate(scenarios, 1):
        if progress is not None:
            print(f"[{i}/{len(scenarios)}] {scenario.key} ...", end=" ", file=progress, flush=True)
        log = root / f"{scenario.key}.log"
        root.mkdir(parents=True, exist_ok=True)
        with stderr_to(log) if quiet else contextlib.nullcontext():
            outcome = run_scenario(scenario, root)
        results.append(Result(scenario, outcome))
        if progress is not None:
            print(f"{RESULT[outcome.status]} ({outcome.seconds:.1f} s)", file=progress, flush=True)
    return results


@dataclass
class Figures:
    faults: int
    by_group: dict[str, int]
    requests: int
    failed_requests: int
    orphans: int
    lost: int
    passed: int
    failed: int
    missing: int
    seconds: float


def figures(results: Sequence[Result]) -> Figures:
    by_group: dict[str, int] = {}
    for r in results:
        by_group[r.scenario.group] = by_group.get(r.scenario.group, 0) + 1
    status = [r.outcome.status for r in results]
    return Figures(
        faults=len(results),
        by_group=by_group,
        requests=sum(r.outcome.requests for r in results),
        failed_requests=sum(r.outcome.failed_requests for r in results),
        orphans=sum(r.outcome.orphans for r in results),
        lost=sum(r.outcome.lost for r in results),
        passed=status.count("pass"),
        failed=status.count("fail"),
        missing=status.count("missing"),
        seconds=sum(r.outcome.seconds for r in results),
    )


def summary_lines(f: Figures) -> list[str]:
    groups = ", ".join(f"{GROUP_TITLES[g]} {n}" for g, n in f.by_group.items())
    return [
        f"faults injected: {f.faults} ({groups})",
        f"requests recorded: {f.requests} ({f.failed_requests} failed or incomplete, each with "
        "its reason)",
        f"processes left behind: {f.orphans}",
        f"finished results lost (answered requests or measured points missing from the "
        f"outputs): {f.lost}",
        f"rows: {f.passed} pass, {f.failed} fail, {f.missing} missing validation; "
        f"{f.seconds:.0f} s",
    ]


WIDTHS = (28, 38, 60, 7)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def format_table(results: Sequence[Result]) -> str:
    head = ("fault", "expected outcome", "observed outcome", "result")
    rule = "-+-".join("-" * w for w in WIDTHS)
    lines = [" | ".join(h.ljust(w) for h, w in zip(head, WIDTHS, strict=True)), rule]
    group = None
    for r in results:
        s, o = r.scenario, r.outcome
        if s.group != group:
            group = s.group
            lines.append(f"== {GROUP_TITLES[group]} ==")
        cells = [_wrap(s.fault, WIDTHS[0]), _wrap(s.expected, WIDTHS[1])]
        cells += [_wrap(o.observed, WIDTHS[2]), [RESULT[o.status]]]
        for k in range(max(len(c) for c in cells)):
            row = [
                (c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, WIDTHS, strict=True)
            ]
            lines.append(" | ".join(row).rstrip())
        lines.append(rule)
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def format_markdown(results: Sequence[Result], how: bool = True) -> str:
    cols = ["fault", "how it is injected", "expected outcome", "observed outcome", "result"]
    if not how:
        cols.remove("how it is injected")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in results:
        s, o = r.scenario, r.outcome
        cells = [s.fault, *([s.injected] if how else []), s.expected, o.observed, RESULT[o.status]]
        lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    return "\n".join(lines)


def to_json(results: Sequence[Result]) -> str:
    rows = [
        {
            "key": r.scenario.key,
            "group": r.scenario.group,
            "fault": r.scenario.fault,
            "injected": r.scenario.injected,
            "expected": r.scenario.expected,
            **asdict(r.outcome),
        }
        for r in results
    ]
    return json.dumps({"rows": rows, "figures": asdict(figures(results))}, indent=2)
