"""DVC stage `report`: reports/index.html, summary.md, best_config.json, report_metrics.json and
the plot data under reports/plots/, from every stage output that exists (see docs/REPORT.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from quantbench.bench.spec import BenchSettings
from quantbench.errors import run_main
from quantbench.estimate.spec import EstimateSettings
from quantbench.params import ConfigError, describe_errors, read_params, section
from quantbench.progress import setup_logging
from quantbench.report.build import build_report
from quantbench.report.inputs import load_inputs
from quantbench.report.spec import ReportSettings
from quantbench.slo import slo_section
from quantbench.workloads.spec import WorkloadSpec


def configured_workloads(raw: dict[str, Any]) -> dict[str, WorkloadSpec]:
    """params.yaml's workloads by name (``workload:``, the single one of earlier versions, too)."""
    found = raw.get("workloads")
    if found is None and isinstance(raw.get("workload"), dict):
        found = {str(raw["workload"].get("name", "default")): raw["workload"]}
    if not isinstance(found, dict):
        return {}
    out = {}
    for name, spec in found.items():
        if not isinstance(spec, dict):
            raise ConfigError(f"params.yaml: workloads.{name}: expected a mapping")
        try:
            out[str(name)] = WorkloadSpec.model_validate({**spec, "name": name})
        except ValidationError as exc:
            lines = describe_errors(exc, f"workloads.{name}", WorkloadSpec)
            raise ConfigError("params.yaml is not valid:\n  " + "\n  ".join(lines)) from None
    return out


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
    workloads = configured_workloads(raw)
    params = {
        "slo": slo,
        "bench": bench.model_dump(mode="json"),
        "workloads": {name: w.model_dump(mode="json") for name, w in workloads.items()},
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
        workloads={name: w.slo_text(slo) for name, w in workloads.items()},
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
