"""How a session plans its points: fresh prompts per point and repeat, sizes, phases."""

from __future__ import annotations

import pytest

from quantbench.load.session import build_traffic, plan_point
from quantbench.workloads.spec import WorkloadSpec


def _spec(**kw: object) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "prompts": {"source": "random", "input_len": 8, "output_len": 4, "num_prompts": 64},
            "load": [{"kind": "concurrency", "concurrency": 2}, {"kind": "rate", "rate": 2.0}],
            "num_requests": 16,
            **kw,
        }
    )


def _plan(spec: WorkloadSpec, index: int, repeat: int):  # type: ignore[no-untyped-def]
    traffic = build_traffic(spec, None)
    return plan_point(spec, index, traffic, url="http://x", model="m", engine="mock",
                      headers={}, repeat=repeat)  # fmt: skip


def test_every_point_and_repeat_sends_its_own_prompts_on_its_own_schedule() -> None:
    # issue 14, item 5: every point and repeat used seed + 0: the same prompts in the same
    # order, so a prefix cache served later points and repeats measured only server noise
    spec = _spec()
    plans = {(i, r): _plan(spec, i, r) for i in (0, 1) for r in (0, 1)}
    orders = {k: [c.prompt_id for c in p.conversations[:16]] for k, p in plans.items()}
    assert len({tuple(o) for o in orders.values()}) == 4
    seeds = {k: p.arrival_seed for k, p in plans.items()}
    assert len(set(seeds.values())) == 4
    assert _plan(spec, 0, 1).conversations == plans[(0, 1)].conversations  # reproducible
    # conversation ids carry point and repeat, and each first message gets a marker of its own
    assert plans[(0, 1)].id_prefix == "c2-r1-" and plans[(0, 1)].unique_prompts


def test_a_point_is_planned_with_its_phases_and_deadlines() -> None:
    plan = _plan(_spec(request_timeout_s=30, point_timeout_s=90), 0, 0)
    assert plan.warmup_conversations == 2  # one per stream
    assert plan.measured_conversations == 16
    assert (plan.request_timeout_s, plan.point_timeout_s) == (30, 90)
    open_plan = _plan(_spec(), 1, 0)
    assert open_plan.mode == "open" and open_plan.warmup_conversations == 1


def test_a_precision_sized_point_measures_what_its_slo_needs() -> None:
    from quantbench.slo import parse_slo

    spec = _spec(num_requests=None, precision={"min_requests": 12, "max_requests": 100})
    traffic = build_traffic(spec, None)

    def minimum(slo: str, cap: int = 100) -> int:
        s = spec.model_copy(update={"precision": spec.precision.model_copy(
            update={"max_requests": cap})})  # fmt: skip
        plan = plan_point(s, 0, traffic, url="http://x", model="m", engine="mock", headers={},
                          constraints=parse_slo(slo), confidence=0.95)  # fmt: skip
        assert plan.precision is not None
        return plan.precision.min_measured

    # each point is sized for its SLO verdict's power (80 % to pass were a quarter of the
    # allowed tail above the limit: quantbench.slo.requests_needed)
    assert minimum("tpot:p50<=1s") == 12  # a p50 needs 11: the workload's own minimum rules
    assert minimum("ttft:p90<=1s") == 61
    assert minimum("ttft:p95<=1s; error_rate<=0.1", cap=200) == 153
    assert minimum("ttft:p99<=1s", cap=100) == 100  # capped: the verdict states its lower power


def test_precision_targets_may_each_have_their_own_width() -> None:
    from pydantic import ValidationError

    from quantbench.workloads.spec import PrecisionSpec

    spec = PrecisionSpec(
        targets=["ttft:p50 ±15%", "tpot:p50", "e2e:p90 +-10%"], rel_half_width=0.05
    )
    assert spec.parsed() == [("ttft", 50.0, 0.15), ("tpot", 50.0, 0.05), ("e2e", 90.0, 0.10)]
    with pytest.raises(ValidationError, match="ttft:p50 ±15%"):
        PrecisionSpec(targets=["ttft:median"])


def test_an_early_pass_point_looks_first_at_36_and_last_at_its_powered_cap() -> None:
    from quantbench.slo import parse_slo

    slo = parse_slo("ttft:p90<=2s; tpot:p50<=150ms; error_rate<=0.1")

    def precision(**kw: object):  # type: ignore[no-untyped-def]
        spec = _spec(num_requests=None, precision={"min_requests": 12, **kw})
        plan = plan_point(spec, 0, build_traffic(spec, None), url="http://x", model="m",
                          engine="mock", headers={}, constraints=slo, confidence=0.95)  # fmt: skip
        assert plan.precision is not None
        return plan.precision

    two = precision(max_requests=88, early_pass=True)
    assert (two.first_look, two.min_measured, two.max_measured) == (36, 85, 88)
    assert two.verdict_confidence == pytest.approx(0.975)
    assert two.pass_limits == [("ttft", 90.0, 2.0), ("tpot", 50.0, 0.15)]
    assert two.error_limit == pytest.approx(0.1)
    # the cap below the powered sample: the last look at the cap
    assert precision(max_requests=64, early_pass=True).min_measured == 64
    # off (the model's default): one look, at 95 %, sized 61
    one = precision(max_requests=88)
    assert (one.first_look, one.min_measured, one.verdict_confidence) == (None, 61, None)
    # a first look no earlier than the cap allows is no look: one look, judged at 95 %
    late = precision(max_requests=36, early_pass=True)
    assert (late.first_look, late.verdict_confidence, late.min_measured) == (None, None, 36)
