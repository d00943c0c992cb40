"""DVC stage `report`: reports/index.html, summary.md, best_config.json, report_metrics.json and
the plot data under reports/plots/, from every stage output that exists (see docs/REPORT.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.config import load_config
from quantbench.errors import run_main
from quantbench.outputs import load_inputs
from quantbench.progress import setup_logging
from quantbench.report.build import build_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--root", type=Path, default=Path("."), help="where reports/ and models/ are"
    )
    parser.add_argument("--out", type=Path, default=None, help="default: <root>/reports")
    args = parser.parse_args()
    setup_logging()
    config = load_config(args.params)
    params = {
        "slo": config.slo.text,
        "bench": config.bench.model_dump(mode="json"),
        "workloads": {name: w.model_dump(mode="json") for name, w in config.workloads.items()},
        "estimate": config.estimate.model_dump(mode="json"),
        "report": config.report.model_dump(mode="json"),
    }
    files = build_report(
        load_inputs(args.root),
        slo=config.slo,
        settings=config.report,
        confidence=config.bench.confidence,
        params=params,
        workloads={name: w.slo_text(config.slo) for name, w in config.workloads.items()},
    )
    written = files.write(args.out or args.root / "reports")
    verdicts = []
    for key, best in files.best_config.items():
        if ":" in key:
            continue  # extra profiles are in the files
        verdicts.append(
            f"{key}: deploy {best['variant']} on {best['engine']}"
            + (", provisionally (see summary.md)" if best.get("status") == "provisional" else "")
            if best.get("status") != "none"
            else f"{key}: no configuration meets its SLO and every check"
        )
    print(f"report: {'; '.join(verdicts) or 'no workload measured'}")
    print(f"  wrote {', '.join(p.as_posix() for p in written)}")
    for problem in files.problems:
        print(f"  note: {problem}")


if __name__ == "__main__":
    run_main(main)
