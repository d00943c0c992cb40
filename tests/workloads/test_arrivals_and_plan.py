"""Open-loop arrival schedules, and how a load process hands out conversations by phase."""

from __future__ import annotations

import itertools
import statistics

import pytest

from quantbench.workloads.arrivals import arrival_offsets
from quantbench.workloads.plan import BodyRules, Conversation, LoadPlan, Turn


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


def test_a_ramp_rises_to_the_rate() -> None:
    from quantbench.workloads.arrivals import arrival_stream

    it = arrival_stream(20.0, 1.0, seed=4, ramp_s=10.0)
    offsets = [next(it) for _ in range(400)]
    first, later = sum(o < 5 for o in offsets), sum(10 <= o < 15 for o in offsets)
    # a linear ramp from 0 to 20/s over 10 s sends about 25 in its first 5 s, then 100 per 5 s
    assert 10 < first < 45 and 80 < later < 120


def _plan(**kw: object) -> LoadPlan:
    convs = [Conversation(f"p{i}", "s", [Turn(f"q{i}", 4)]) for i in range(3)]
    rules = BodyRules(model="m", profile="mock", stream_usage={}, fixed_length=(),
                      fixed_output_length=False)  # fmt: skip
    base = {"url": "http://x", "path": "/v1/chat/completions", "api": "chat", "point": "pt",
            "mode": "closed", "users": 2, "conversations": convs, "rules": rules,
            "warmup_conversations": 2, "measured_conversations": 4}  # fmt: skip
    return LoadPlan(**{**base, **kw})  # type: ignore[arg-type]


def _hand_out(plan: LoadPlan, finish_after: int | None = None) -> list[tuple[int, str]]:
    """Tickets a dispatcher hands out; the measured ones stay open until ``finish_after``
    tickets were handed out, as if their requests were still running."""
    import gevent

    from quantbench.load.dispatch import Dispatcher

    d = Dispatcher(plan, sink=lambda rec: None)
    d.start(0.0)
    out: list[tuple[int, str]] = []
    while len(out) < 50:
        ticket = d.next_ticket()
        if ticket is None:
            break
        out.append((ticket.index, ticket.phase))
        if finish_after is not None and len(out) >= finish_after:
            d.measured_open.clear()
            d._maybe_finish()
            gevent.sleep(0)
    d.stopped = True
    return out


def test_warm_up_first_then_measured_then_cool_down_while_measured_run() -> None:
    tickets = _hand_out(_plan(), finish_after=9)
    phases = [p for _, p in tickets]
    assert phases[:2] == ["warmup", "warmup"]
    assert phases[2:6] == ["measured"] * 4
    # measured requests still running: the streams keep the load with cool-down conversations
    assert phases[6:9] == ["cooldown"] * 3
    # once every measured request ended, nothing more is handed out
    assert len(tickets) == 9
    assert [i for i, _ in tickets] == list(range(9))


def test_nothing_after_the_measured_ones_when_they_have_ended() -> None:
    tickets = _hand_out(_plan(), finish_after=6)
    assert [p for _, p in tickets] == ["warmup"] * 2 + ["measured"] * 4


def test_shares_partition_the_conversations() -> None:
    plan = _plan(measured_conversations=7, warmup_conversations=2)
    seen = []
    for k in range(3):
        seen += [t for t in _hand_out(plan.share(k, 3), finish_after=None) if t[1] != "cooldown"]
    assert sorted(i for i, _ in seen) == list(range(9))
    assert sorted(i for i, p in seen if p == "measured") == list(range(2, 9))


def test_a_share_never_stops_on_precision() -> None:
    from quantbench.workloads.plan import Precision

    plan = _plan(precision=Precision([("ttft", 50.0, 0.05)], 0.05, 0.95, 12))
    assert plan.adaptive and not plan.share(0, 2).adaptive


def test_plan_round_trips_through_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from quantbench.workloads.plan import Precision

    plan = _plan(mode="open", rate=2.0, headers={"a": "b"},
                 precision=Precision([("ttft", 50.0, 0.05)], 0.05, 0.95, 12))  # fmt: skip
    plan.save(tmp_path / "p.json")
    assert LoadPlan.load(tmp_path / "p.json") == plan
