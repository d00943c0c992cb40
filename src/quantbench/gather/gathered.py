"""The machines side by side: per machine its best configuration per workload, per workload the
machines by cost per million good tokens, and the roofline for the hardware nobody measured.

Which machine is cheapest for a workload is said only as far as the figures' 95 % intervals
allow: the cheapest is called separable from the next only where their cost intervals do not
overlap (a conservative test: non-overlap of two 95 % intervals is significant at well under
5 %); otherwise the machines are listed as not separable, in order of their point estimates.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from quantbench.gather.machines import (
    THROUGHPUTS,
    Fingerprint,
    MachineRun,
    WorkloadBest,
    cost_per_million,
)

SCHEMA_VERSION = 1
OUTPUT = "reports/gathered/gathered.json"


class Machine(BaseModel):
    fingerprint: Fingerprint
    experiments: list[str]
    price_per_hour: float | None = Field(
        description="The experiments' price; None where they disagree (each row is priced "
        "at its own experiment's)."
    )
    currency: str
    best: list[WorkloadBest]


class MachineRow(BaseModel):
    machine: str  # fingerprint id
    label: str
    best: WorkloadBest


class WorkloadComparison(BaseModel):
    workload: str
    ranked_by: str = Field(description="The throughput priced (machines.THROUGHPUTS).")
    rows: list[MachineRow] = Field(description="Cheapest per million tokens that count first.")
    cheapest: str | None
    verdict: str


class Estimated(BaseModel):
    """The roofline's best for a pair on hardware no gathered experiment ran on."""

    hardware: str
    pair: str
    best_output_tps: float | None
    best_concurrency: int | None
    price_per_hour: float | None
    cost_per_million: float | None
    experiment: str


class Gathered(BaseModel):
    schema_version: Literal[1] = SCHEMA_VERSION
    currency: str
    machines: list[Machine]
    workloads: list[WorkloadComparison]
    estimated: list[Estimated]
    runs: list[MachineRun]


def _better(a: WorkloadBest, b: WorkloadBest) -> bool:
    """Whether ``a`` beats ``b`` on one machine: ranked over not, then the throughput ranked by
    (one workload's profile ranks every experiment by the same one)."""
    if (a.status == "ranked") != (b.status == "ranked"):
        return a.status == "ranked"
    av = a.tps.value if a.tps else -1.0
    bv = b.tps.value if b.tps else -1.0
    return av > bv


def machines(runs: list[MachineRun]) -> list[Machine]:
    groups: dict[str, list[MachineRun]] = {}
    prints: dict[str, Fingerprint] = {}
    for run in runs:
        if run.fingerprint is None:
            continue  # no fingerprint: listed with its problems, not as a machine
        groups.setdefault(run.fingerprint.id, []).append(run)
        prints[run.fingerprint.id] = run.fingerprint
    out = []
    for key, members in groups.items():
        best: dict[str, WorkloadBest] = {}
        for run in members:
            for entry in run.best:
                held = best.get(entry.workload)
                if held is None or _better(entry, held):
                    best[entry.workload] = entry
        prices = {r.price_per_hour for r in members}
        out.append(Machine(
            fingerprint=prints[key],
            experiments=[r.experiment for r in members],
            price_per_hour=prices.pop() if len(prices) == 1 else None,
            currency=members[0].currency,
            best=[best[w] for w in sorted(best)],
        ))  # fmt: skip
    return sorted(out, key=lambda m: m.fingerprint.label)


def _cost(row: MachineRow) -> float:
    c = row.best.cost_per_million
    return c.value if c is not None else float("inf")


def compare(workload: str, found: list[Machine], currency: str) -> WorkloadComparison:
    rows = [MachineRow(machine=m.fingerprint.id, label=m.fingerprint.label, best=b)
            for m in found for b in m.best if b.workload == workload]  # fmt: skip
    rows.sort(key=_cost)
    metric = next((r.best.ranked_by for r in rows if r.best.status == "ranked"), THROUGHPUTS[0])
    tokens = "good tokens" if metric == THROUGHPUTS[0] else "output tokens"
    priced = [r for r in rows if r.best.cost_per_million is not None]
    if not priced:
        return WorkloadComparison(workload=workload, ranked_by=metric, rows=rows, cheapest=None,
                                  verdict="no machine has a priced, ranked configuration")  # fmt: skip
    first = priced[0]
    cost = first.best.cost_per_million
    assert cost is not None
    if len(priced) == 1:
        verdict = f"{first.label}: the only machine with a priced, ranked configuration"
        return WorkloadComparison(workload=workload, ranked_by=metric, rows=rows,
                                  cheapest=first.machine, verdict=verdict)  # fmt: skip
    second = priced[1]
    other = second.best.cost_per_million
    assert other is not None
    if cost.high is not None and other.low is not None and cost.high < other.low:
        verdict = (f"{first.label} is cheapest per million {tokens} "
                   f"({cost.value:.3g} {currency}, 95 % interval up to {cost.high:.3g}), "
                   f"separable from {second.label} (from {other.low:.3g})")  # fmt: skip
        return WorkloadComparison(workload=workload, ranked_by=metric, rows=rows,
                                  cheapest=first.machine, verdict=verdict)  # fmt: skip
    why = ("their cost intervals overlap" if cost.high is not None and other.low is not None
           else "an interval is missing (too few repeats)")  # fmt: skip
    verdict = (f"not separable: {first.label} ({cost.value:.3g} {currency}) and {second.label} "
               f"({other.value:.3g}); {why}")  # fmt: skip
    return WorkloadComparison(workload=workload, ranked_by=metric, rows=rows, cheapest=None,
                              verdict=verdict)  # fmt: skip


def estimated(runs: list[MachineRun], found: list[Machine], prices: dict[str, float]
              ) -> list[Estimated]:  # fmt: skip
    """Roofline rows for the hardware (``estimate.hardware``'s named GPUs) no machine here has."""
    measured = " ".join(g.upper() for m in found for g in m.fingerprint.gpus)
    seen: set[tuple[str, str]] = set()
    out = []
    for run in runs:
        for row in run.estimates:
            hardware = row.hardware
            if not hardware or hardware == "this" or hardware.endswith(".json"):
                continue  # the experiment's own machine: measured
            if hardware.upper() in measured:
                continue
            pair = f"{row.variant}-{row.engine}"
            if (hardware, pair) in seen:
                continue
            seen.add((hardware, pair))
            tps = row.best_output_tps
            price = prices.get(hardware) or prices.get(hardware.upper())
            cost = cost_per_million(price, tps)
            out.append(Estimated(hardware=hardware, pair=pair, best_output_tps=tps,
                                 best_concurrency=row.best_concurrency,
                                 price_per_hour=price, cost_per_million=cost,
                                 experiment=run.experiment))  # fmt: skip
    return sorted(out, key=lambda e: (e.hardware, e.pair))


def gather(runs: list[MachineRun], prices: dict[str, float] | None = None) -> Gathered:
    found = machines(runs)
    currencies = {r.currency for r in runs} or {"USD"}
    currency = currencies.pop() if len(currencies) == 1 else "mixed currencies"
    workloads = sorted({b.workload for m in found for b in m.best})
    return Gathered(
        currency=currency,
        machines=found,
        workloads=[compare(w, found, currency) for w in workloads],
        estimated=estimated(runs, found, prices or {}),
        runs=runs,
    )
