"""Open-loop arrival schedules, and how plans hand out tickets and split across workers."""

from __future__ import annotations

import itertools
import statistics

import pytest

from quantbench.load.arrivals import arrival_offsets
from quantbench.load.plan import LoadPlan, PlannedRequest


def _gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_gaps_have_the_asked_mean_and_shape(burstiness: float) -> None:
    gaps = _gaps(arrival_offsets(5.0, burstiness, seed=3, count=20001))
    mean = statistics.fmean(gaps)
    cv = statistics.pstdev(gaps) / mean
    assert mean == pytest.approx(1 / 5.0, rel=0.03)
    # gamma with shape k has coefficient of variation 1/sqrt(k); Poisson (k=1) has 1
    assert cv == pytest.approx(burstiness**-0.5, rel=0.05)


def test_count_until_and_seed() -> None:
    a = arrival_offsets(10.0, 1.0, seed=1, count=50)
    assert len(a) == 50 and a[0] == 0.0 and a == sorted(a)
    assert a == arrival_offsets(10.0, 1.0, seed=1, count=50)
    assert a != arrival_offsets(10.0, 1.0, seed=2, count=50)
    b = arrival_offsets(10.0, 1.0, seed=1, until_s=30.0)
    assert max(b) < 30.0 and 250 < len(b) < 350
    assert len(arrival_offsets(10.0, 1.0, seed=1, count=5, until_s=100.0)) == 5
    with pytest.raises(ValueError):
        arrival_offsets(1.0, 1.0, seed=0)


def _plan(**kw: object) -> LoadPlan:
    reqs = [PlannedRequest(f"p{i}", "s", {"i": i}) for i in range(3)]
    base = {"url": "http://x", "path": "/v1/completions", "api": "completions", "point": "pt",
            "mode": "closed", "users": 2, "requests": reqs, "total": 10, "warmup_requests": 2}  # fmt: skip
    return LoadPlan(**{**base, **kw})  # type: ignore[arg-type]


def test_tickets_cycle_bodies_and_flag_warmup() -> None:
    tickets = list(_plan().tickets())
    assert [t.index for t in tickets] == list(range(10))
    assert [t.request.prompt_id for t in tickets[:4]] == ["p0", "p1", "p2", "p0"]
    assert [t.warmup for t in tickets[:3]] == [True, True, False]


def test_shares_partition_the_plan() -> None:
    plan = _plan(total=11)
    shares = [list(plan.share(k, 3).tickets()) for k in range(3)]
    assert sorted(t.index for s in shares for t in s) == list(range(11))
    assert [plan.share(k, 3).share_size() for k in range(3)] == [4, 4, 3]


def test_open_plan_and_endless_plan() -> None:
    plan = _plan(mode="open", total=None, arrivals=[0.0, 0.5, 0.9])
    assert [t.at for t in plan.tickets()] == [0.0, 0.5, 0.9] and plan.share_size() == 3
    endless = _plan(total=None, duration_s=1.0, warmup_s=0.5)
    it = endless.tickets()
    assert [next(it).index for _ in range(100)][-1] == 99
    assert endless.share_size() is None and endless.stop_after_s == 1.5


def test_plan_round_trips_through_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = _plan(mode="open", arrivals=[0.0, 1.0], headers={"a": "b"})
    plan.save(tmp_path / "p.json")
    assert LoadPlan.load(tmp_path / "p.json") == plan
