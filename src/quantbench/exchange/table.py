"""Another tool's run as one row of quantbench's figures: the cells `quantbench import` prints
and the report's "Runs from other tools" shows, written once."""

from __future__ import annotations

from typing import Any

from quantbench.exchange.figures import ForeignRun

COLUMNS = (
    "tool", "file", "run", "load", "completed / failed", "output tok/s",
    "TTFT p50 (ms)", "TPOT p50 (ms)", "ITL p50 (ms)", "E2E p50 (ms)",
)  # fmt: skip


def _ms(stats: Any) -> str:
    return "-" if stats is None or stats.p50 is None else f"{stats.p50:.1f}"


def cells(run: ForeignRun) -> list[str]:
    """The run's cells, in COLUMNS' order."""
    tok = "-" if run.output_throughput is None else f"{run.output_throughput:.1f}"
    return [
        f"{run.tool} {run.tool_version or ''}".strip(), run.source, run.label, run.load,
        f"{run.completed if run.completed is not None else '-'} / "
        f"{run.failed if run.failed is not None else '-'}",
        tok, _ms(run.ttft), _ms(run.tpot), _ms(run.itl), _ms(run.e2e),
    ]  # fmt: skip
