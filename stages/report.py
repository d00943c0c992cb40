"""DVC stage `report`: reports/index.html, summary.md, best_config.json, report_metrics.json and
the plot data under reports/plots/, from every stage output that exists (see docs/REPORT.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.bench.spec import BenchSettings
from quantbench.errors import run_main
from quantbench.estimate.spec import EstimateSettings
from quantbench.load.spec import WorkloadSpec
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.report.build import build_report
from quantbench.report.inputs import load_inputs
from quantbench.report.spec import ReportSettings
from quantbench.slo import slo_section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--root", type=Path, default=Path("."), help="where reports/ and models/ are"
    )
    parser.add_argument("--out", type=Path, default=None, help="default: <root>/reports")
    args = parser.parse_args()
    setup_logging()
    raw = read_params(args.params)
    settings = section(raw, "report", ReportSettings)
    slo = slo_section(raw)
    bench = section(raw, "bench", BenchSettings)
    params = {
        "slo": slo,
        "bench": bench.model_dump(mode="json"),
        "workload": (
            section(raw, "workload", WorkloadSpec).model_dump(mode="json")
            if "workload" in raw
            else None
        ),
        "estimate": section(raw, "estimate", EstimateSettings).model_dump(mode="json"),
        "report": settings.model_dump(mode="json"),
    }
    inputs = load_inputs(args.root)
    files = build_report(
        inputs,
        slo=slo,
        settings=settings,
        confidence=bench.confidence,
        params=params,
    )
    written = files.write(args.out or args.root / "reports")
    best = files.best_config.get("default", {})
    verdict = (
        f"deploy {best['variant']} on {best['engine']}"
        if best.get("status") == "ok"
        else "no configuration meets the SLO"
    )
    print(f"report: {verdict}; wrote {', '.join(p.as_posix() for p in written)}")
    for problem in inputs.problems:
        print(f"  note: {problem}")


if __name__ == "__main__":
    run_main(main)
