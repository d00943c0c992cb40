"""``quantbench export`` and ``quantbench import``: bench runs out in other tools' formats, other
tools' runs in as quantbench's figures.

    quantbench export --to llm-d            # exports/llm-d/<pair>__<server>__<workload>__<load>__r<k>.json
    quantbench export --to vllm             # the same runs as `vllm bench serve` result JSON
    quantbench import result.json [...]     # imports/<name>.json, and a table of the runs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from quantbench import __version__
from quantbench.errors import UserError
from quantbench.exchange import aiperf, guidellm, llmd, vllm_bench
from quantbench.exchange.figures import ForeignRun, ImportedRuns, Tool
from quantbench.exchange.table import COLUMNS, cells
from quantbench.load.export import to_vllm_result
from quantbench.load.records import read_records
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import PairSummary
from quantbench.schemas.env import EnvInfo
from quantbench.schemas.session import SessionSummary

READERS: dict[Tool, Any] = {"vllm-bench-serve": vllm_bench, "aiperf": aiperf, "guidellm": guidellm}


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--to", required=True, choices=("llm-d", "vllm"),
        help="llm-d: llm-d-benchmark's benchmark report, version 0.2; vllm: `vllm bench serve`'s "
        "result JSON (--save-result --save-detailed)",
    )  # fmt: skip
    parser.add_argument("--bench", type=Path, default=Path("reports/bench"),
                        help="the bench stages' outputs (default: reports/bench)")  # fmt: skip
    parser.add_argument("--env", type=Path, default=Path("reports/env.json"),
                        help="the fingerprint stage's output, for the machine's CPU")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="default: exports/<format>/")


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, help="result files of other tools")
    parser.add_argument(
        "--tool", choices=("auto", *READERS), default="auto",
        help="which tool wrote them (auto: recognised from the file's keys)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("imports"), help="default: imports/")


def _runs(bench: Path) -> list[Path]:
    """Every run's summary.json under the bench outputs: <pair>/<server>/<workload>/<load>/r<k>/."""
    return sorted(p for p in bench.glob("*/*/*/*/r*/summary.json") if p.is_file())


def run_export(args: argparse.Namespace) -> int:
    paths = _runs(args.bench)
    if not paths:
        raise UserError(
            f"{args.bench}: no bench runs (<pair>/<server>/<workload>/<load>/r<k>/summary.json); "
            "run the pipeline first (`make repro`) or give --bench"
        )
    out: Path = args.out or Path("exports") / args.to
    out.mkdir(parents=True, exist_ok=True)
    cpu = schema_io.read(args.env, EnvInfo).cpu.model if args.env.is_file() else "unknown CPU"
    pairs: dict[str, PairSummary | None] = {}
    written = 0
    for path in paths:
        rel = path.parent.relative_to(args.bench)
        pair, server_point = rel.parts[0], rel.parts[1]
        if pair not in pairs:
            pair_file = args.bench / pair / "summary.json"
            pairs[pair] = schema_io.read(pair_file, PairSummary) if pair_file.is_file() else None
        summary_of_pair = pairs[pair]
        server = next(
            (s for s in summary_of_pair.servers if s.server_point == server_point), None
        ) if summary_of_pair else None  # fmt: skip
        session = schema_io.read(path, SessionSummary)
        records_path = path.with_name("records.jsonl")
        records = read_records(records_path) if records_path.is_file() else []
        for point in session.points:
            label = "/".join(rel.parts)
            if args.to == "llm-d":
                data = llmd.report(
                    session, point, records, label=label,
                    command=server.command if server else (),
                    env=server.env if server else None,
                    engine_version=summary_of_pair.engine_version if summary_of_pair else None,
                    accelerator=cpu, quantbench_version=__version__,
                )  # fmt: skip
            else:
                api = (session.workload.get("api") or "chat") if session.workload else "chat"
                data = to_vllm_result(
                    point, model=session.model, api=str(api), percentiles=[50, 90, 99],
                    records=[r for r in records if r.point == point.point] or None,
                )  # fmt: skip
            name = "__".join(rel.parts) + (f"__{point.point}" if len(session.points) > 1 else "")
            (out / f"{name}.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
            written += 1
    print(f"export: {written} runs as {args.to} into {out}/")
    return 0


def detect(data: Any, path: Path) -> Tool:
    found: list[Tool] = [tool for tool, mod in READERS.items() if mod.looks_like(data)]
    if len(found) != 1:
        raise UserError(
            f"{path}: not recognised as a result of {', '.join(READERS)} "
            f"({'matches ' + ', '.join(found) if found else 'none of their keys'}); "
            "give --tool if it is one of them"
        )
    return found[0]


def read_file(path: Path, tool: str = "auto") -> ImportedRuns:
    """One tool's result file as quantbench's figures."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot be read as JSON ({exc})") from exc
    chosen: Tool = detect(data, path) if tool == "auto" else tool  # type: ignore[assignment]
    try:
        runs: list[ForeignRun] = READERS[chosen].read(data, path.name)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"{path}: not a {chosen} result as quantbench reads it ({exc})") from exc
    return ImportedRuns(tool=chosen, source=path.name, runs=runs)


def run_import(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for path in args.files:
        imported = read_file(path, args.tool)
        target = args.out / f"{path.stem}.json"
        target.write_text(imported.model_dump_json(indent=1), encoding="utf-8")
        for run in imported.runs:
            print("| " + " | ".join(cells(run)) + " |")
            for note in run.notes:
                print(f"  note: {note}", file=sys.stderr)
    print("(TPOT first token excluded, per request; ITL chunk gaps, pooled: quantbench's "
          "definitions, each tool's field mapped to the one that measures the same)")  # fmt: skip
    return 0
