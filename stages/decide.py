"""DVC stage `decide`: measure again, in alternation, what the screening of every bench stage's
rows could not settle (rows not yet separable from their workload's leader; tuned-against-default
gains), within report.confirm's budget, into reports/decide/ (docs/BENCH.md, "How the decision
is made")."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from quantbench.bench.job import JobPaths, pair_job
from quantbench.bench.remeasure import RowKey, RowServers
from quantbench.bench.spec import BenchSettings
from quantbench.decision.confirm import Planned, run_duels
from quantbench.decision.drift import rounds_drift
from quantbench.engines.server import ServerError, sigterm_as_interrupt
from quantbench.errors import run_main
from quantbench.fsutil import atomic_dir
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.report.confirmations import plan_duels
from quantbench.report.inputs import load_inputs
from quantbench.report.spec import ReportSettings
from quantbench.schemas import io as schema_io
from quantbench.schemas.decide import ConfirmFile, Measured, ServerUse
from quantbench.slo import slo_section

log = logging.getLogger("decide")
SLO_FLAGS = ("misses its SLO", "SLO undecided")
OUT = Path(ConfirmFile.OUTPUT).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--root", type=Path, default=Path("."), help="where reports/ and models/ are"
    )
    parser.add_argument("--out", type=Path, default=None, help=f"default: <root>/{OUT}")
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    report = section(params, "report", ReportSettings)
    bench = section(params, "bench", BenchSettings)
    slo = slo_section(params)
    out = args.out or args.root / OUT
    started = time.monotonic()
    confirm = report.confirm
    inputs = load_inputs(args.root)
    planned = plan_duels(inputs, slo, report, bench.confidence) if confirm.enabled else []
    notes = [f"screening: {p}" for p in inputs.problems]
    paths = JobPaths(
        args.params, args.root / "models/variants", args.root / "reports/workloads",
        args.root / "reports/quality",
    )  # fmt: skip
    pairs = sorted({RowKey.parse(k).pair for p in planned for k in (p.a, p.b)})
    jobs = {name: pair_job(params, name, paths) for name in pairs}
    with sigterm_as_interrupt(), atomic_dir(out) as tmp:
        servers = RowServers(jobs, tmp)

        def servers_of(plan: Planned) -> set[tuple[str, str]]:
            return {(k.pair, k.server_point) for k in map(RowKey.parse, (plan.a, plan.b))}

        def needs(plan: Planned) -> None:
            servers.keep_only(servers_of(plan))
            servers.start(servers_of(plan))  # side by side: two starts in the time of one

        # each server's start as the bench measured it: a duel whose start would not leave its
        # budget a round is passed over (one vLLM start could take a short budget whole)
        bench_starts = {
            (pair, s.server_point): s.report.ready_seconds
            for pair, summary in inputs.pairs.items()
            for s in summary.servers
            if s.report.ready_seconds
        }

        def measure(key: str, index: int, side: str) -> Measured:
            folder = tmp / "rounds" / key.replace("/", "__") / f"round{index}"
            rk = RowKey.parse(key)
            metric = next(p.metric for p in planned if key in (p.a, p.b))
            try:
                got = servers.measure(key, 100 + index, metric, folder, confirm.round_s)
            except (ServerError, RuntimeError) as exc:
                return Measured(key=key, figure=None, error=str(exc).splitlines()[0])
            f = got.figure
            said = f"{f.value:.1f} [{f.low:.1f}, {f.high:.1f}]" if f else got.error or "no figure"
            log.info("%s round %d: %s %s", rk, index, metric, said)
            row = got.row
            # a round compares the ranked figure: its own (short) SLO verdict is recorded, and
            # only what would make the figure itself wrong (the load not reached, the client
            # the bottleneck, other lengths, a failure) keeps it out
            flags = [f for f in row.get("flags") or [] if not f.startswith(SLO_FLAGS)]
            return Measured(
                key=key,
                figure=got.figure,
                slo_verdict=row.get("slo_verdict"),
                rankable=not flags and not row.get("error"),
                flags=flags,
                records=got.records.relative_to(tmp).as_posix() if got.records else None,
                wall_s=got.wall_s,
                error=got.error,
            )

        try:
            duels = run_duels(
                planned, measure, budget_s=confirm.budget_s, max_rounds=confirm.max_rounds,
                min_rounds=confirm.min_rounds, margin=report.equivalence, confidence=bench.confidence, drift=report.drift, before_duel=needs,
                start_s=lambda plan: servers.start_s(servers_of(plan), bench_starts),
            )  # fmt: skip
        finally:
            servers.close()
        used = [
            ServerUse(
                pair=pair,
                server_point=point,
                error=error,
                ready_seconds=(rep or {}).get("ready_seconds"),
                peak_rss_bytes=(rep or {}).get("peak_rss_bytes"),
            )
            for pair, point, rep, error in servers.reports()
        ]
        measured = rounds_drift(duels)
        if measured is not None:  # the report's comparisons carry the larger of it and report.drift
            notes.append(f"drift {measured.text()} (report.drift {report.drift:.1%})")
        result = ConfirmFile(
            enabled=confirm.enabled, budget_s=confirm.budget_s, min_rounds=confirm.min_rounds,
            max_rounds=confirm.max_rounds,
            wall_s=round(time.monotonic() - started, 1), duels=duels, servers=used, notes=notes,
        )  # fmt: skip
        schema_io.write(tmp / "confirm.json", result)
    for duel in duels:
        print(
            f"decide [{duel.workload}] {duel.purpose}: {duel.a} against {duel.b}: "
            f"{duel.verdict or 'no verdict'} ({len(duel.rounds)} rounds; {duel.stopped})"
        )
    if not duels:
        print("decide: the screening left nothing to measure again")


if __name__ == "__main__":
    run_main(main)
