"""What the decide stage measures again, and in which order (quantbench.decision.plan)."""

from __future__ import annotations

from quantbench.decision.confirm import Planned
from quantbench.decision.plan import interleaved


def test_the_workloads_take_turns_in_the_plan() -> None:
    """Item 11: the plan listed multi-turn's duels before chat's, and the default run's budget
    (150 s) ended after multi-turn's: chat's claim was never tested. The workloads take turns,
    each keeping its own order (another pair's contender before the leader's own settings)."""

    def plan(workload: str, a: str) -> Planned:
        return Planned(workload, "contender", a, "lead", "good_output_throughput", "screened")

    plans = [plan("multi-turn", "q4"), plan("multi-turn", "q8"), plan("chat", "b32")]
    assert [(p.workload, p.a) for p in interleaved(plans)] == [
        ("multi-turn", "q4"), ("chat", "b32"), ("multi-turn", "q8"),
    ]  # fmt: skip
    assert interleaved([]) == []
