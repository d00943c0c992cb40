"""What the decide stage measures again: the screening's open questions, as duels.

From the judging of every workload under its SLO (:func:`~quantbench.decision.profiles.
judge_profiles`, screening: the rows as the bench stages measured them, no confirming rounds): each row not yet separable from its workload's
leader becomes a contender duel against the leader; each swept pair whose tuned setting claims
a gain beyond noise over its default becomes a tuned-vs-default duel (see
:mod:`quantbench.decision.confirm`). Contenders come first, those of another pair before another
setting of the leader's own: they decide the recommendation. The workloads take turns (the
first contender of each, then the second of each, ...): the budget is spent on every
workload's claim before any gets a second duel (the default run's multi-turn duels took all of
it, and chat's never started). When it runs them, :func:`~quantbench.decision.confirm.run_duels`
also puts a duel whose servers are already up before one that must start its own.
"""

from __future__ import annotations

from collections.abc import Mapping

from quantbench.decision.confirm import Planned
from quantbench.decision.profiles import JudgingSettings, judge_profiles
from quantbench.decision.tuning import tuning_gains
from quantbench.outputs import ReportInputs
from quantbench.slo import Slo


def plan_duels(
    inputs: ReportInputs,
    slo: Slo,
    settings: JudgingSettings,
    confidence: float,
    workloads: Mapping[str, Slo] | None = None,
) -> list[Planned]:
    """The duels the screening leaves open, contenders first."""
    profiles = judge_profiles(inputs, slo, settings, confidence, workloads, screening=True)
    contenders: list[Planned] = []
    tuned: list[Planned] = []
    for profile in profiles:
        decision = profile.decision
        if decision is None or decision.leader is None:
            continue
        for cand in decision.unresolved:
            comparison = decision.comparisons[cand.key]
            contenders.append(
                Planned(
                    workload=profile.workload,
                    purpose="contender",
                    a=cand.key,
                    b=decision.leader.key,
                    metric=profile.ranked_by,
                    screened=comparison.text(confidence),
                )
            )
        for gain in tuning_gains(inputs, profile, confirmed=False):
            if gain.default is None or gain.low is None or gain.low <= 1:
                continue  # no gain claimed: nothing to confirm
            if gain.tuned.key == gain.default.key:
                continue
            tuned.append(
                Planned(
                    workload=profile.workload,
                    purpose="tuned-vs-default",
                    a=gain.tuned.key,
                    b=gain.default.key,
                    metric=profile.ranked_by,
                    screened=f"{gain.ratio:.2f}x [{gain.low:.2f}, {gain.high:.2f}] from the "
                    "measurements that chose the tuned setting",
                )
            )

    # contenders of another pair first (they decide the variant and the engine), then another
    # setting of the leader's own pair, then the tuned-against-default gains
    def same_pair(plan: Planned) -> bool:
        return plan.a.split("/")[0] == plan.b.split("/")[0]

    contenders.sort(key=same_pair)
    return interleaved(contenders) + interleaved(tuned)


def interleaved(plans: list[Planned]) -> list[Planned]:
    """The plans with the workloads taking turns (first of each, in the order they first
    appear, then second of each, ...), each workload's own order kept."""
    by_workload: dict[str, list[Planned]] = {}
    for plan in plans:
        by_workload.setdefault(plan.workload, []).append(plan)
    out: list[Planned] = []
    queues = list(by_workload.values())
    for turn in range(max((len(q) for q in queues), default=0)):
        out += [q[turn] for q in queues if turn < len(q)]
    return out
