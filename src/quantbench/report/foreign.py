"""Runs of other tools (``quantbench import``'s files in ``imports/``) as rows beside ours.

Each run's figures are already quantbench's (:mod:`quantbench.exchange`: every tool's field mapped
to the figure of ours that measures the same quantity); the rows say which tool, which file and
what differs (its notes), and take no part in any decision: another tool's run measured another
server, at another time, under its own load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quantbench.exchange.figures import ForeignRun, ImportedRuns
from quantbench.exchange.table import COLUMNS, cells

NOTE = (
    "In quantbench's figures: TTFT to the first content chunk, TPOT per request (E2E - TTFT) / "
    "(tokens - 1), ITL the gaps between chunks, pooled; each tool's field mapped to the figure "
    'that measures the same (docs/REPORT.md, "Results other tools read"). Another tool\'s run '
    "measured its own server and load: shown beside our rows, never ranked."
)


def row(run: ForeignRun) -> dict[str, Any]:
    """One run as the report's cells (and its notes)."""
    return {"cells": cells(run), "notes": list(run.notes)}


def rows(imported: Sequence[ImportedRuns]) -> list[dict[str, Any]]:
    return [row(run) for file in imported for run in file.runs]


def markdown(imported: Sequence[ImportedRuns], md: Any) -> list[str]:
    """The summary's section (``md`` escapes text for markdown); none without imports."""
    table = rows(imported)
    if not table:
        return []
    parts = ["## Runs from other tools", "", NOTE, ""]
    parts.append("| " + " | ".join(COLUMNS) + " |")
    parts.append("|" + "---|" * len(COLUMNS))
    for r in table:
        parts.append("| " + " | ".join(md(c) for c in r["cells"]) + " |")
    parts.append("")
    for r in table:
        parts.extend(f"- {md(r['cells'][0])} · {md(r['cells'][2])}: {md(n)}" for n in r["notes"])
    parts.append("")
    return parts
