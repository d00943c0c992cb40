"""Print docs/RESULTS.md's tables from a finished run's stage outputs (every bench row, with its
intervals and checks), so the published figures are the outputs', never typed by hand.

    python tools/results_table.py [--root .]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from quantbench.schemas import io as schema_io  # noqa: E402
from quantbench.schemas.bench import BenchRow, PairSummary  # noqa: E402


def _fig(row: BenchRow, name: str, digits: int = 1) -> str:
    value = getattr(row, name)
    if value is None:
        return "–"
    if name in row.too_few:
        return "too few"
    iv = row.intervals.get(name)
    text = f"{value:.{digits}f}"
    return f"{text} [{iv.low:.{digits}f}, {iv.high:.{digits}f}]" if iv is not None else text


def _status(row: BenchRow) -> str:
    if row.error:
        return f"error: {row.error.splitlines()[0][:60]}"
    verdict = row.slo_verdict or "no SLO"
    if row.rankable:
        return f"{verdict}, ranked"
    return f"{verdict}; " + "; ".join(f[:70] for f in row.flags)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=REPO)
    args = parser.parse_args()
    pairs = {
        path.parent.name: schema_io.read(path, PairSummary, name=path.parent.name)
        for path in sorted((args.root / "reports/bench").glob("*/summary.json"))
    }
    peak = {
        (name, s.server_point): s.report.peak_rss_bytes
        for name, summary in pairs.items()
        for s in summary.servers
    }
    print(
        "| workload | pair | server setting | load | requests | out tok/s | good tok/s | "
        "TTFT p50 ms | TPOT p50 ms | E2E p99 ms | peak RSS MiB | status |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [(r.workload, name, r) for name, s in pairs.items() for r in s.rows]
    for workload, name, row in sorted(rows, key=lambda x: (x[0], x[1], x[2].server_point)):
        rss = peak.get((name, row.server_point))
        print(
            f"| {workload} | {name} | {row.server_point} | {row.load_point} | "
            f"{row.completed}/{row.requests} | {_fig(row, 'output_throughput')} | "
            f"{_fig(row, 'good_output_throughput')} | {_fig(row, 'ttft_p50_ms', 0)} | "
            f"{_fig(row, 'tpot_p50_ms')} | {_fig(row, 'e2e_p99_ms', 0)} | "
            f"{f'{rss / 2**20:.0f}' if rss else '–'} | {_status(row)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
