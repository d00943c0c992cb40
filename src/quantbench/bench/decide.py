"""The decide stage: measure again, in alternation, what the screening left open.

The screening (every bench stage's rows, judged: :mod:`quantbench.decision.plan`) leaves rows not
yet separable from their workload's leader and tuned-against-default gains; each becomes a duel
that :func:`quantbench.decision.confirm.run_duels` measures round by round within
``report.confirm``'s budget, on the pairs' own servers (:class:`~quantbench.bench.remeasure.
RowServers`, started side by side when a duel needs them). ``stages/decide.py`` calls
:func:`decide_stage`; docs/BENCH.md, "How the decision is made", says why.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from quantbench.bench.configured import PipelineConfig
from quantbench.bench.job import JobPaths, pair_job
from quantbench.bench.remeasure import RowKey, RowServers
from quantbench.decision.confirm import Planned, run_duels
from quantbench.decision.drift import rounds_drift
from quantbench.decision.plan import plan_duels
from quantbench.engines.server import ServerError, sigterm_as_interrupt
from quantbench.fsutil import atomic_dir
from quantbench.outputs import ReportInputs, load_inputs
from quantbench.schemas import io as schema_io
from quantbench.schemas.decide import ConfirmFile, Measured, ServerUse

log = logging.getLogger("decide")
SLO_FLAGS = ("misses its SLO", "SLO undecided")
OUT = Path(ConfirmFile.OUTPUT).parent


def _servers_of(plan: Planned) -> set[tuple[str, str]]:
    """The (pair, server point) servers a duel's two rows run on."""
    return {(k.pair, k.server_point) for k in map(RowKey.parse, (plan.a, plan.b))}


def bench_starts(inputs: ReportInputs) -> dict[tuple[str, str], float]:
    """Each server's start as the bench stage measured it: a duel whose start would not leave
    its budget a round is passed over (one vLLM start could take a short budget whole)."""
    return {
        (pair, s.server_point): s.report.ready_seconds
        for pair, summary in inputs.pairs.items()
        for s in summary.servers
        if s.report.ready_seconds
    }


class _Rounds:
    """The duels' rounds, each side measured on its row's server into ``tmp/rounds/``."""

    def __init__(
        self, servers: RowServers, planned: list[Planned], tmp: Path, round_s: float
    ) -> None:
        self.servers, self.planned, self.tmp, self.round_s = servers, planned, tmp, round_s

    def needs(self, plan: Planned) -> None:
        """Before a duel: its two servers up (side by side: two starts in the time of one), the
        others stopped."""
        self.servers.keep_only(_servers_of(plan))
        self.servers.start(_servers_of(plan))

    def measure(self, key: str, index: int, side: str) -> Measured:
        """One side of one round: the row measured again for ``round_s`` seconds."""
        folder = self.tmp / "rounds" / key.replace("/", "__") / f"round{index}"
        rk = RowKey.parse(key)
        metric = next(p.metric for p in self.planned if key in (p.a, p.b))
        try:
            got = self.servers.measure(key, 100 + index, metric, folder, self.round_s)
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
            records=got.records.relative_to(self.tmp).as_posix() if got.records else None,
            wall_s=got.wall_s,
            error=got.error,
        )


def decide_stage(config: PipelineConfig, root: Path, out: Path | None = None) -> ConfirmFile:
    """The decide stage below ``root`` (where reports/ and models/ are): the screening's open
    questions planned, measured within the budget, written to ``out`` (default
    ``<root>/reports/decide``) as confirm.json with the rounds' records, all or nothing."""
    report = config.report
    confirm = report.confirm
    out = out or root / OUT
    started = time.monotonic()
    inputs = load_inputs(root)
    planned = (
        plan_duels(inputs, config.slo, report, config.bench.confidence) if confirm.enabled else []
    )
    notes = [f"screening: {p}" for p in inputs.problems]
    paths = JobPaths(root / "models/variants", root / "reports/workloads", root / "reports/quality")
    pairs = sorted({RowKey.parse(k).pair for p in planned for k in (p.a, p.b)})
    jobs = {name: pair_job(config, name, paths) for name in pairs}
    starts = bench_starts(inputs)
    with sigterm_as_interrupt(), atomic_dir(out) as tmp:
        servers = RowServers(jobs, tmp)
        rounds = _Rounds(servers, planned, tmp, confirm.round_s)
        try:
            duels = run_duels(
                planned, rounds.measure, budget_s=confirm.budget_s, max_rounds=confirm.max_rounds,
                min_rounds=confirm.min_rounds, margin=report.equivalence,
                confidence=config.bench.confidence, drift=report.drift, before_duel=rounds.needs,
                start_s=lambda plan: servers.start_s(_servers_of(plan), starts),
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
    return result
