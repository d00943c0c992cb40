"""The race within a pair's grid as the load process judges it at its looks (load/race.py)."""

from __future__ import annotations

import random

import pytest
from scipy.stats import norm

from quantbench.load.race import RACE_STOP, cannot_reach, ceiling, race_levels, reach
from quantbench.load.records import RequestRecord
from quantbench.sequential import crossing_probability, look_schedule
from quantbench.slo import NO_SLO, Slo
from quantbench.workloads.plan import LoadPlan, Precision, RaceFloor

from .test_metrics import rec


def serial(n: int, tokens: int = 10, token_s: float = 0.1, *, ttft: float = 0.1, seed: int = 0):
    """``n`` requests one after another on one stream: ``tokens`` chunks each, ``token_s``
    apart (jittered by up to 5 %), the first ``ttft`` after the send."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        first = t + ttft
        chunks = [first + k * token_s * (1 + rng.uniform(-0.05, 0.05)) for k in range(tokens)]
        out.append(rec(i, t, chunks, chunks[-1]))
        t = chunks[-1]
    return out


def floor(
    value: float,
    *,
    slo: str = "",
    after: int = 12,
    metric: str | None = None,
    first_look: int | None = None,
) -> RaceFloor:
    metric = metric or ("good_output_throughput" if slo else "output_throughput")
    return RaceFloor(
        metric=metric, floor=value, leader="a @ c4", slo=Slo(slo), after=after, confidence=0.9975,
        first_look=first_look,
    )  # fmt: skip


def test_a_point_whose_interval_lies_below_the_leader_stops() -> None:
    records = serial(12)  # one stream at about 10 tokens a second
    high = reach(floor(30.0), records)
    assert high is not None and 10.0 < high < 12.0  # its interval's high end, just above 10
    reason = cannot_reach(floor(30.0), 12, records)
    assert reason is not None and reason.startswith(RACE_STOP)
    assert "a @ c4" in reason and "after 12 measured requests" in reason
    # a leader it could still reach: it goes on
    assert cannot_reach(floor(high * 0.99), 12, records) is None
    # before the workload's min_requests, no look
    assert cannot_reach(floor(30.0, after=16), 12, records) is None


def test_the_bound_is_the_ranked_figure_under_the_slo() -> None:
    records = serial(12, ttft=0.3)
    # every request misses the TTFT limit: no good tokens at all, so no leader is reachable
    assert reach(floor(1.0, slo="ttft<=100ms"), records) == pytest.approx(0.0)
    assert cannot_reach(floor(1.0, slo="ttft<=100ms"), 12, records) is not None
    # within it, good throughput is the output throughput
    good = reach(floor(1.0, slo="ttft<=1s"), records)
    assert good == pytest.approx(reach(floor(1.0), records))


def test_requests_in_flight_count_for_the_tokens_they_delivered() -> None:
    done = serial(12)
    end = done[-1].end_time
    assert end is not None
    # three more streams' requests, each half-way through its answer at the look
    pending = [
        rec(100 + k, end - 0.6, [end - 0.5 + 0.1 * j for j in range(5)], end) for k in range(3)
    ]
    for r in pending:
        r.end_time, r.status, r.output_tokens = None, "completed", None
    alone = reach(floor(30.0), done)
    with_pending = reach(floor(30.0), done, pending)
    assert alone is not None and with_pending is not None and with_pending > alone
    # and they are not judged: a look with them is a look at the same completed requests
    assert isinstance(pending[0], RequestRecord) and pending[0].phase == "measured"


def test_no_measured_request_no_bound() -> None:
    assert reach(floor(1.0), []) is None
    warm = [rec(0, 0.0, [0.1, 0.2], 0.2, warmup=True)]
    assert cannot_reach(floor(1.0, after=0), 0, warm) is None


def test_the_race_travels_in_the_load_plan() -> None:
    race = floor(42.0, slo="tpot<=100ms")
    precision = Precision(
        targets=[("ttft", 50.0, 0.15)], rel_half_width=0.15, confidence=0.95, min_measured=12,
        race=race,
    )  # fmt: skip
    from quantbench.workloads.plan import BodyRules

    plan = LoadPlan(
        url="http://127.0.0.1:1", path="/v1/chat/completions", api="chat", point="c1",
        mode="closed", users=1, conversations=[],
        rules=BodyRules(model="m", profile="openai", stream_usage={}, fixed_length=(),
                        fixed_output_length=False),
        precision=precision,
    )  # fmt: skip
    back = LoadPlan.from_dict(plan.to_dict())
    assert back.precision is not None and back.precision.race == race


def test_a_look_does_not_import_while_requests_are_in_flight() -> None:
    # The first look (the fourth measured request) imported scipy.stats inside the event loop:
    # 0.6-0.9 s in which every request in flight stalled and streams sat idle (a fake server's
    # rows failed "ran the load it claims"). A precision-sized point's dispatcher now has it
    # before its clock starts.
    import subprocess
    import sys

    code = (
        "import time\n"
        "from quantbench.load.dispatch import Dispatcher, quantile_bounds, proportion_bounds\n"
        "from quantbench.workloads.plan import BodyRules, LoadPlan, Precision\n"
        "rules = BodyRules(model='m', profile='openai', stream_usage={}, fixed_length=(),\n"
        "                  fixed_output_length=False)\n"
        "precision = Precision(targets=[('ttft', 50.0, 0.15)], rel_half_width=0.15,\n"
        "                      confidence=0.95, min_measured=12)\n"
        "plan = LoadPlan(url='http://127.0.0.1:1', path='/v1/chat/completions', api='chat',\n"
        "                point='c1', mode='closed', users=1, conversations=[], rules=rules,\n"
        "                precision=precision)\n"
        "Dispatcher(plan, lambda rec: None)\n"
        "t = time.perf_counter()\n"
        "quantile_bounds([0.1 * i for i in range(36)], 90.0, 0.975)\n"
        "proportion_bounds(0, 36, 0.975)\n"
        "print(time.perf_counter() - t)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout) < 0.2, f"a look took {out.stdout.strip()} s: it imported something"


def paced(paces: list[float], tokens: int = 10, ttft: float = 0.3) -> list[RequestRecord]:
    """One stream's requests one after another, request k's tokens ``paces[k]`` apart."""
    out, t = [], 0.0
    for i, pace in enumerate(paces):
        chunks = [t + ttft + k * pace for k in range(tokens)]
        out.append(rec(i, t, chunks, chunks[-1]))
        t = chunks[-1]
    return out


def test_a_closed_loop_stops_at_its_first_look_on_its_streams_ceiling() -> None:
    # one stream, tokens 0.1 s apart after a 0.1-s TTFT: at most 10 tokens a second, whatever
    # lengths its later answers have; four requests show it (the interval waits for 12)
    records = serial(4)
    cap = ceiling(records, 1, 0.99875)
    assert cap is not None and 10.0 < cap < 13.0
    assert ceiling(records, 4, 0.99875) == pytest.approx(4 * cap)
    race = floor(30.0, first_look=4)
    reason = cannot_reach(race, 4, records, streams=1)
    assert reason is not None and reason.startswith(RACE_STOP), reason
    assert "1 stream(s) at one token per min(TTFT, TPOT)" in reason
    assert f"at most {cap:.1f}," in reason and "after 4 measured requests" in reason
    # an open loop's streams are not fixed: nothing before min_requests
    assert cannot_reach(race, 4, records, streams=None) is None
    # no first look: nothing before min_requests either
    assert cannot_reach(floor(30.0), 4, records, streams=1) is None
    # four such streams could reach the leader: it goes on
    assert cannot_reach(race, 4, records, streams=4) is None
    # from min_requests on, the interval alone decides: each family of looks spends only its
    # own share of the race's error rate (race_levels)
    twelve = serial(12)
    later = cannot_reach(floor(30.0, first_look=4), 12, twelve, streams=1)
    high = reach(floor(30.0), twelve)
    assert later is not None and high is not None
    assert f"at most {high:.1f}, its interval's high end" in later
    assert "min(TTFT, TPOT)" not in later


def test_from_min_requests_the_ceiling_no_longer_stops_a_point() -> None:
    # one stream at 10 tokens a second: its ceiling is tighter than its interval, and a floor
    # between the two stops it on the ceiling before min_requests and not after, where the
    # ceiling's looks have no share of the race's error rate left (the interval's is tested)
    records = serial(12)
    cap = ceiling(records, 1, 0.99875)
    high = reach(floor(1.0), records)
    assert cap is not None and high is not None and cap < high
    race = floor((cap + high) / 2, first_look=4)
    cap8 = ceiling(records[:8], 1, 0.99875)
    assert cap8 is not None and cap8 < race.floor
    assert cannot_reach(race, 8, records[:8], streams=1) is not None
    assert cannot_reach(race, 12, records, streams=1) is None


def test_the_race_levels_spend_exactly_its_error_rate() -> None:
    # the default schedule: min_requests 12, a cap of 88, a look every 4, 95 % two-sided
    first, interval, ceiling_level = race_levels(12, 88, 0.95, 4)
    assert first == 4
    alpha = 0.025
    interval_looks = look_schedule(12, 88, 4)
    assert len(interval_looks) == 20
    # the ceiling's two looks (4 and 8) at an equal share each; the interval's 20 the rest,
    # through the boundary: together exactly the race's one-sided error
    spent_ceiling = 2 * (1 - ceiling_level)
    c = norm.isf((1 - interval) / 2)
    spent_interval = crossing_probability(c, interval_looks)
    assert spent_ceiling == pytest.approx(alpha * 2 / 22)
    assert spent_ceiling + spent_interval == pytest.approx(alpha, rel=1e-3)
    # and each interval look is tested less strictly than Bonferroni's share (0.11 %) would
    one_sided = (1 - interval) / 2
    assert 0.0035 < one_sided < 0.0045
    assert one_sided > 3 * alpha / 22
    # a RaceFloor carries both levels to the load process
    race = RaceFloor(metric="output_throughput", floor=1.0, leader="a @ c4", slo=NO_SLO, after=12,
                     confidence=interval, first_look=first, ceiling_confidence=ceiling_level)  # fmt: skip
    assert race.one_sided == ceiling_level


def test_short_first_answers_do_not_stop_a_stream_that_long_ones_would_make_fast() -> None:
    # the first answers are 2 tokens behind a 0.5-s TTFT: 2 tokens in 0.6 s, 3.3 a second, where
    # the stream delivers 10 a second once answering. The throughput so far is below a leader at
    # 8; the ceiling is not (a run of long answers would pass 8): the point goes on
    short = serial(4, tokens=2, ttft=0.5)
    end = short[-1].end_time
    assert end is not None and 8 / (end - short[0].send_time) < 4.0
    cap = ceiling(short, 1, 0.99875)
    assert cap is not None and cap > 8.0
    assert cannot_reach(floor(8.0, first_look=4), 4, short, streams=1) is None


def test_a_spread_of_paces_widens_the_ceiling() -> None:
    steady = ceiling(paced([0.1, 0.1, 0.1, 0.1]), 1, 0.99875)
    spread = ceiling(paced([0.05, 0.15, 0.08, 0.12]), 1, 0.99875)  # the same mean pace
    assert steady is not None and steady == pytest.approx(10.0)
    assert spread is None or spread > 1.5 * steady
    # below two requests, or nothing measured: no ceiling
    assert ceiling(paced([0.1]), 1, 0.99875) is None
    assert ceiling([rec(0, 0.0, [0.1, 0.2], 0.2, warmup=True)] * 3, 1, 0.99875) is None
