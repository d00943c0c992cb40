"""One pair end to end on a scripted fake server: sweep, repeats, SLOs, failures, best, search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import psutil
import pytest

from quantbench.bench.job import workloads_job
from quantbench.bench.run import PairJob, run_pair
from quantbench.bench.spec import BenchSettings
from quantbench.decision.margins import DecisionMargins
from quantbench.engines.base import EngineSettings
from quantbench.load.race import RACE_STOP
from quantbench.slo import Slo
from quantbench.workloads.spec import WorkloadSpec

from .conftest import FakeEngine, FakeSettings

# timing: the race and the search compare fake servers' measured speeds: run alone
pytestmark = [pytest.mark.server, pytest.mark.timing]

WORKLOAD = WorkloadSpec.model_validate(
    {
        "prompts": {"source": "random", "input_len": 8, "output_len": 8, "num_prompts": 4},
        "load": [
            {"kind": "concurrency", "concurrency": 1},
            {"kind": "concurrency", "concurrency": 4},
        ],
        "num_requests": 8,
        "fixed_output_length": True,
        "name": "chat",
    }
)


def job(engine, artifact, settings, *, slo="", bench=None, workloads=None) -> PairJob:
    # every point of every setting: the race across settings skips some, and has its own
    # tests (test_the_grid_races_*)
    bench = bench or BenchSettings(price_per_hour=3.6, race=False)
    return workloads_job(
        "tiny-fake", artifact, engine, settings, workloads or {"chat": WORKLOAD}, Slo(slo), bench
    )


def grid_of(*streams: int) -> WorkloadSpec:
    return WORKLOAD.model_copy(
        update={"load": WorkloadSpec.model_validate(
            {"prompts": WORKLOAD.prompts.model_dump(), "num_requests": 8,
             "load": [{"kind": "concurrency", "concurrency": c} for c in streams]}
        ).load}
    )  # fmt: skip


def no_fake_servers_left(workdir: Path) -> bool:
    """No mock server of this test is left: every one it started reads its script from the
    test's own folder (so another test running beside this one cannot fail it)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "quantbench.mock_server" in cmd and str(workdir) in cmd:
            return False
    return True


def test_grid_sweep_starts_each_server_once_and_judges_every_point(
    fake_engine, fake_artifact, tmp_path
) -> None:
    settings = FakeSettings(sweep={"itl_ms": [2.0, 40.0]})
    summary = run_pair(
        job(fake_engine, fake_artifact, settings, slo="tpot:p50<=20ms"), tmp_path / "out"
    )
    assert summary.server_points == 2 and len(summary.servers) == 2
    rows = summary.rows
    assert [(r.server_point, r.load_point) for r in rows] == [
        ("itl_ms=2.0", "c1"), ("itl_ms=2.0", "c4"), ("itl_ms=40.0", "c1"), ("itl_ms=40.0", "c4"),
    ]  # fmt: skip
    for row in rows:
        assert row.completed == 8 and row.failed == 0 and row.error is None
    fast, slow = rows[0], rows[2]
    assert fast.slo_verdict == "pass" and slow.slo_verdict == "fail"
    assert any("tpot p50" in reason for reason in slow.slo_reasons)
    assert fast.rankable and not slow.rankable and "misses its SLO" in slow.flags
    # every headline figure carries its interval, and the row its offered and achieved load
    assert {"output_throughput", "tpot_p50_ms", "ttft_p50_ms"} <= set(fast.intervals)
    assert fast.load is not None and fast.load.reached and fast.load.offered == 1
    # cost: 3.6/hour = 0.001/s, so cost per 1e6 tokens = 1000 / tokens-per-second
    assert fast.cost_per_million_tokens == pytest.approx(1000 / fast.output_throughput)
    best = summary.best["chat"]
    assert best is not None and best.server_point == "itl_ms=2.0"
    assert summary.ranked_by == "good_output_throughput" and summary.decided_by["chat"]
    assert best.command[1:3] == ["-m", "quantbench.mock_server"]
    assert (tmp_path / "out/itl_ms=2.0/chat/c4/r0/records.jsonl").is_file()
    assert all(s.served_check is not None for s in summary.servers)
    assert all(s.report.peak_rss_bytes > 0 for s in summary.servers)
    assert no_fake_servers_left(tmp_path)


def test_repeats_give_intervals(fake_engine, fake_artifact, tmp_path) -> None:
    bench = BenchSettings(repeats=3)
    summary = run_pair(job(fake_engine, fake_artifact, FakeSettings(), bench=bench), tmp_path)
    row = summary.rows[0]
    assert row.repeats == 3 and row.completed == 24
    interval = row.intervals["output_throughput"]
    assert interval.n == 3 and interval.half_width >= 0
    assert row.slo_passed is None and summary.ranked_by == "output_throughput"
    # each repeat sent its own prompts in its own order (seeded by point and repeat)
    from quantbench.load.records import read_records

    orders = [
        [r.prompt_id for r in read_records(tmp_path / f"default/chat/c1/r{k}/records.jsonl")]
        for k in range(3)
    ]
    assert len({tuple(o) for o in orders}) == 3


def test_rows_on_the_stand_in_gpu_carry_its_counters_over_their_windows(
    fake_engine, fake_artifact, tmp_path, fake_gpu, monkeypatch
) -> None:
    from quantbench.load import gpu_window

    monkeypatch.setattr(gpu_window, "SAMPLE_INTERVAL_S", 0.02)  # the fake server's points are short
    bench = BenchSettings(repeats=2, race=False)
    summary = run_pair(job(fake_engine, fake_artifact, FakeSettings(), bench=bench), tmp_path)
    for row in summary.rows:
        assert row.gpu is not None and row.gpu.samples >= 4, row.key  # two repeats of >= 2
        [device] = row.gpu.devices
        assert (device.utilization_mean_pct, device.memory_used_max_mib) == (87.0, 61234.0)
        assert (device.power_mean_w, device.sm_clock_mean_mhz) == (612.45, 1980.0)
    # each repeat's own window is in its session summary, and the row adds their samples
    repeats = [
        json.loads((tmp_path / f"default/chat/c1/r{k}/summary.json").read_text())["points"][0]
        for k in range(2)
    ]
    assert sum(r["gpu"]["samples"] for r in repeats) == summary.rows[0].gpu.samples


def test_one_run_gives_every_headline_figure_its_interval(fake_engine, fake_artifact, tmp_path):
    # At one repeat, request throughput and goodput had no interval; every other figure has its
    # own (batch means, order statistics, Wilson) or says its sample is too small.
    from quantbench.decision.rows import HEADLINE

    summary = run_pair(job(fake_engine, fake_artifact, FakeSettings(), slo="e2e<=5s"), tmp_path)
    row = summary.rows[0]
    assert row.repeats == 1 and row.completed == 8
    for name in HEADLINE:
        if getattr(row, name, None) is None or name in row.too_few:
            continue
        assert name in row.intervals, f"{name} has no interval"
    assert {"request_throughput", "goodput"} <= set(row.intervals)
    assert summary.host == "127.0.0.1"  # where the servers bound, for the report


def test_the_prefix_cache_is_reset_before_every_run_and_the_row_says_so(
    fake_engine, fake_artifact, tmp_path
) -> None:
    # The bench asked the engine to reset its cache and threw the answer away: a reset that
    # failed (or an engine that offers none) was invisible in the row and the report.
    bench = BenchSettings(repeats=2)
    summary = run_pair(job(fake_engine, fake_artifact, FakeSettings(), bench=bench), tmp_path)
    assert len(summary.rows) == 2 and len(fake_engine.resets) == 2 * 2  # points x repeats
    assert all(r.cache is not None and r.cache.reset == "reset" for r in summary.rows)

    fake_engine.reset_answer = "POST /reset_prefix_cache answered 404"
    summary = run_pair(job(fake_engine, fake_artifact, FakeSettings()), tmp_path / "again")
    row = summary.rows[0]
    assert row.cache.reset == "POST /reset_prefix_cache answered 404"
    from quantbench.report.tables import cache_text

    assert "answered 404" in cache_text(row)


def test_a_server_that_fails_costs_its_points_not_the_run(fake_engine, fake_artifact, tmp_path):
    settings = FakeSettings(sweep={"crash": [True, False]})
    summary = run_pair(job(fake_engine, fake_artifact, settings, slo="ttft:p50<=5s"), tmp_path)
    crashed = [r for r in summary.rows if r.server_point == "crash=on"]
    assert len(crashed) == 2
    for row in crashed:
        assert row.slo_passed is False and "exit code 7" in row.error and not row.rankable
        assert "fatal: no weights" in row.error
    healthy = [r for r in summary.rows if r.server_point == "crash=off"]
    assert all(r.completed == 8 for r in healthy)
    assert summary.best["chat"] is not None, [r.flags for r in healthy]
    assert summary.best["chat"].server_point == "crash=off"
    assert no_fake_servers_left(tmp_path)


def test_edge_search_matches_the_grid_with_fewer_runs(fake_engine, fake_artifact, tmp_path):
    # Each extra stream adds 20 ms per token: TPOT ~ 5 + 20 (c - 1) ms, so tpot <= 35 ms holds up
    # to c = 2 (25 ms) and fails from c = 3 (45 ms): 10 ms of margin on both sides for a busy CI.
    settings = FakeSettings(itl_ms=5.0, ms_per_concurrent=20.0)
    slo = "tpot:p50<=35ms"
    grid_job = job(fake_engine, fake_artifact, settings, slo=slo,
                   workloads={"chat": grid_of(*range(1, 9))})  # fmt: skip
    grid = run_pair(grid_job, tmp_path / "grid")
    passing = [r.shape["concurrency"] for r in grid.rows if r.slo_passed]
    grid_edge = max(passing)
    assert passing == list(range(1, grid_edge + 1)), "passing must be monotone for this server"

    bench = BenchSettings(mode="search", search={"start": 1, "max": 8, "num_requests": 8})
    search = run_pair(
        job(fake_engine, fake_artifact, settings, slo=slo, bench=bench), tmp_path / "s"
    )
    info = search.servers[0].search["chat"]
    assert info.edge == grid_edge
    assert info.runs < info.grid_size == 8


def test_a_setting_that_cannot_reach_the_leader_stops_after_one_run(
    fake_engine, fake_artifact, tmp_path
) -> None:
    # Every setting used to run its whole search (grow, bisect, confirm) even when its first run
    # showed it could not win: 150 ms a token is at most ~7 tok/s a stream, ~27 at 4 streams,
    # far below what 2 ms a token delivers at one stream already. (At 60 ms a token, ~67 at 4
    # streams, a 2-vCPU guest's stalls once widened the leader's interval from its 8 requests
    # in 0.3 s below that, and the slow setting ran its whole search.)
    settings = FakeSettings(sweep={"itl_ms": [2.0, 150.0]})
    slo = "tpot:p50<=300ms"  # both settings meet it at every load: only throughput tells them apart
    search = {"start": 1, "max": 4, "num_requests": 8}
    raced = run_pair(
        job(fake_engine, fake_artifact, settings, slo=slo,
            bench=BenchSettings(mode="search", search=search)),
        tmp_path / "raced",
    )  # fmt: skip
    fast, slow = (s.search["chat"] for s in raced.servers)
    assert fast.dropped is None and fast.edge == 4
    assert slow.runs == 1 and slow.dropped is not None
    assert "cannot reach the leader (itl_ms=2.0" in slow.dropped
    assert raced.best["chat"].server_point == "itl_ms=2.0"
    # without the race the slow setting runs its whole search to the same end
    full = run_pair(
        job(fake_engine, fake_artifact, settings, slo=slo,
            bench=BenchSettings(mode="search", search=search, race=False)),
        tmp_path / "full",
    )  # fmt: skip
    assert full.servers[1].search["chat"].runs > 1
    assert full.best["chat"].server_point == "itl_ms=2.0"
    assert no_fake_servers_left(tmp_path)


def test_the_grid_races_settings_that_cannot_reach_the_leader(
    fake_engine, fake_artifact, tmp_path
) -> None:
    # The grid ran every load point of every setting, even once a setting's first point showed
    # it could not win: 60 ms a token is at most ~17 tok/s a stream, ~67 at 4 streams, far
    # below what 2 ms a token delivers. Its higher loads are now skipped, and said so.
    settings = FakeSettings(sweep={"itl_ms": [2.0, 60.0]})
    slo = "tpot:p50<=100ms"  # both meet it everywhere: only throughput tells them apart
    workloads = {"chat": grid_of(1, 2, 4)}
    raced = run_pair(
        job(fake_engine, fake_artifact, settings, slo=slo, workloads=workloads,
            bench=BenchSettings()),
        tmp_path / "raced",
    )  # fmt: skip
    points = [(r.server_point, r.load_point) for r in raced.rows]
    assert points == [
        ("itl_ms=2.0", "c1"), ("itl_ms=2.0", "c2"), ("itl_ms=2.0", "c4"), ("itl_ms=60.0", "c1"),
    ]  # fmt: skip
    assert all(r.error is None for r in raced.rows), "no row stands for a load that was not run"
    fast, slow = raced.servers
    assert not fast.raced
    drop = slow.raced["chat"]
    assert drop.skipped == ["c2", "c4"]
    assert drop.leader.startswith("itl_ms=2.0 @ ") and drop.metric == "good_output_throughput"
    c1 = raced.rows[3]
    # the bound: 4 streams of what one stream delivered at most, below the leader's low end
    assert drop.bound == pytest.approx(4 * c1.intervals["good_output_throughput"].high)
    assert drop.bound < drop.floor
    assert "cannot reach the leader (itl_ms=2.0" in drop.reason
    assert raced.best["chat"].server_point == "itl_ms=2.0"

    # without the race every point runs, and the same setting wins
    full = run_pair(
        job(fake_engine, fake_artifact, settings, slo=slo, workloads=workloads,
            bench=BenchSettings(race=False)),
        tmp_path / "full",
    )  # fmt: skip
    assert len(full.rows) == 6 and not full.servers[1].raced
    assert full.best["chat"].server_point == "itl_ms=2.0"
    assert no_fake_servers_left(tmp_path)


def test_a_lower_load_listed_after_the_leader_stops_once_it_cannot_reach_it(
    fake_engine, fake_artifact, tmp_path
) -> None:
    # Precision-sized points ran to their targets even where the pair's best row was already
    # out of reach: one stream of 20 ms tokens delivers a quarter of what four do. Listed after
    # the four streams, the one stream now stops at its first look and says why. (At 10 ms a
    # token a noisy hour's client, its loop 0.8 ms late at p50, came near the 1 ms that flags
    # the load generator as the bottleneck, and the four streams' row was not ranked.)
    settings = FakeSettings(itl_ms=20.0)
    slo = "tpot:p50<=100ms"
    sized = WorkloadSpec.model_validate(
        {
            "prompts": {"source": "random", "input_len": 8, "output_len": 32, "num_prompts": 4},
            "load": [{"kind": "concurrency", "concurrency": c} for c in (4, 1)],
            # a target the one stream cannot meet at 8 requests: only the race stops it there
            "precision": {"targets": ["tpot:p50 ±0.1%"], "min_requests": 8, "max_requests": 24},
            "warmup_requests": 4,
            "fixed_output_length": True,
            "name": "chat",
        }
    )
    raced = run_pair(
        job(fake_engine, fake_artifact, settings, slo=slo, workloads={"chat": sized},
            bench=BenchSettings()),
        tmp_path / "raced",
    )  # fmt: skip
    c4, c1 = raced.rows
    assert (c4.load_point, c1.load_point) == ("c4", "c1")
    assert c4.rankable and RACE_STOP not in c4.stop_reason, (c4.flags, c4.stop_reason)
    # at its first look (4 requests, before min_requests): one stream cannot deliver more than
    # a token per 20 ms, whatever lengths its answers have, a quarter of what four streams did
    assert c1.stop_reason.startswith(RACE_STOP) and c1.completed == 4, c1.stop_reason
    assert "(default @ c4," in c1.stop_reason
    assert "1 stream(s) at one token per min(TTFT, TPOT)" in c1.stop_reason
    drop = raced.servers[0].raced["chat"]
    assert drop.stopped == ["c1"] and drop.skipped == [] and drop.leader == "default @ c4"
    assert drop.bound <= c1.intervals["good_output_throughput"].high
    # the floor: the leader's low end less the decision's margins (quantbench.decision.margins)
    share = DecisionMargins().race_share(BenchSettings().confidence)
    assert drop.bound < drop.floor
    assert drop.floor == pytest.approx(c4.intervals["good_output_throughput"].low * share)
    assert raced.best["chat"] is not None and raced.best["chat"].load_point == "c4"

    # without the race the one stream runs on to its cap, and the same row wins
    full = run_pair(
        job(fake_engine, fake_artifact, settings, slo=slo, workloads={"chat": sized},
            bench=BenchSettings(race=False)),
        tmp_path / "full",
    )  # fmt: skip
    assert full.rows[1].completed > 8 and not full.servers[0].raced
    assert full.best["chat"] is not None and full.best["chat"].load_point == "c4"
    assert no_fake_servers_left(tmp_path)


class SlottedSettings(FakeSettings):
    """The fake server's settings with a batch limit it declares, as llama.cpp's slots."""

    slots: int | None = None


class SlottedEngine(FakeEngine):
    """The fake engine, declaring ``slots`` as its batch limit (the cap the race works with)."""

    settings_model: ClassVar[type[EngineSettings]] = SlottedSettings

    def max_batch(self, settings: SlottedSettings) -> int | None:
        return settings.slots


def thinking_chat(path: Path, think_s: float) -> WorkloadSpec:
    """Two-turn conversations with ``think_s`` between the turns: a stream sits idle most of the
    time, as a multi-turn workload's users do."""
    lines = [
        {"id": f"c{i}", "max_tokens": 4, "messages": [
            {"role": "user", "content": f"question number {i} about the weather"},
            {"role": "user", "content": "and tomorrow?", "think_s": think_s},
        ]}
        for i in range(4)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return WorkloadSpec.model_validate(
        {"name": "chat", "prompts": {"source": "conversations", "path": str(path)},
         "load": [{"kind": "concurrency", "concurrency": c, "num_requests": n}
                  for c, n in ((1, 8), (2, 8), (4, 32))],
         "fixed_output_length": True}
    )  # fmt: skip


def test_the_grid_race_lets_streams_that_think_fill_a_one_slot_server(
    fake_artifact, tmp_path
) -> None:
    # The race capped a setting's reach at its batch limit: one slot, so one stream's figure
    # (at most ~26 tok/s here) was all it could ever deliver, below the 8-slot leader's 4 streams
    # (~85, low end ~65), and its c2 and c4 were skipped. With think time between turns a stream
    # leaves the slot idle most of the time (here ~80 %), so more streams fill it: the bound
    # counts requests served at once, not streams, and reaches the leader. (The fake serves every
    # request at once whatever it declares; the race only knows the declared limit.)
    engine = SlottedEngine(tmp_path)
    settings = SlottedSettings(sweep={"slots": [8, 1]})
    workloads = {"chat": thinking_chat(tmp_path / "chat.jsonl", think_s=0.3)}
    summary = run_pair(
        job(engine, fake_artifact, settings, workloads=workloads, bench=BenchSettings()),
        tmp_path / "out",
    )
    one_slot = [r for r in summary.rows if r.server_point == "slots=1"]
    assert [r.load_point for r in one_slot] == ["c1", "c2", "c4"], summary.servers[1].raced
    assert not summary.servers[1].raced
    assert all(r.error is None for r in one_slot)
    # the mechanism: one stream kept well under one request in flight
    assert one_slot[0].load is not None and one_slot[0].load.mean_in_flight < 0.5
    assert no_fake_servers_left(tmp_path)


def test_the_grid_race_never_skips_a_load_below_what_it_measured(
    fake_engine, fake_artifact, tmp_path
) -> None:
    # The bound covers loads at or above the lowest one measured: a grid listed from the top
    # (c4, then c1) must still run the slow setting's c1, which no bound covers.
    settings = FakeSettings(sweep={"itl_ms": [2.0, 60.0]})
    summary = run_pair(
        job(fake_engine, fake_artifact, settings, slo="tpot:p50<=100ms",
            workloads={"chat": grid_of(4, 1)}, bench=BenchSettings()),
        tmp_path,
    )  # fmt: skip
    slow = [r.load_point for r in summary.rows if r.server_point == "itl_ms=60.0"]
    assert slow == ["c4", "c1"] and not summary.servers[1].raced
    assert no_fake_servers_left(tmp_path)


def test_each_workload_keeps_its_own_search(fake_engine, fake_artifact, tmp_path) -> None:
    """One server, two workloads in search mode: the second search overwrote the first."""
    settings = FakeSettings(itl_ms=4.0)
    slo = "tpot:p50<=60ms"
    short = WORKLOAD.model_copy(update={"num_requests": 8})
    workloads = {"chat": short, "again": short.model_copy(update={"name": "again"})}
    bench = BenchSettings(mode="search", search={"start": 1, "max": 2, "num_requests": 8})
    pair = job(fake_engine, fake_artifact, settings, slo=slo, bench=bench, workloads=workloads)
    summary = run_pair(pair, tmp_path / "two")
    searches = summary.servers[0].search
    assert set(searches) == {"chat", "again"}
    for name, info in searches.items():
        tried = [r.shape["concurrency"] for r in summary.rows if r.workload == name]
        assert [t.load for t in info.tried] == tried and info.edge == 2


def test_an_interrupted_pair_resumes_without_measuring_again(
    fake_engine, fake_artifact, tmp_path, monkeypatch
) -> None:
    # The bench stage wrote its folder whole or not at all: Ctrl-C threw away every point.
    from dataclasses import replace

    from quantbench.bench import run as bench_run
    from quantbench.bench.resume import PartialStore

    settings = FakeSettings(sweep={"itl_ms": [2.0, 4.0]})
    store = PartialStore("tiny-fake", "key-1", root=tmp_path / "partial")
    store.open()
    pair = replace(job(fake_engine, fake_artifact, settings), store=store)
    real_run, calls = bench_run._PointRunner.run, []

    def interrupted(self, workload, spec, index, race=None):  # the third point: Ctrl-C
        calls.append(index)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_run(self, workload, spec, index, race)

    monkeypatch.setattr(bench_run._PointRunner, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_pair(pair, tmp_path / "out")
    assert no_fake_servers_left(tmp_path)
    monkeypatch.setattr(bench_run._PointRunner, "run", real_run)
    kept = {k: store.row("itl_ms=2.0", "chat", k) for k in ("c1", "c4")}
    assert all(row is not None for row in kept.values())

    launched = []
    real_launch = fake_engine.launch
    monkeypatch.setattr(
        fake_engine, "launch", lambda *a: launched.append(a[1].itl_ms) or real_launch(*a)
    )
    resumed = PartialStore("tiny-fake", "key-1", root=tmp_path / "partial")
    assert resumed.open() == 2
    summary = run_pair(replace(pair, store=resumed), tmp_path / "out")
    assert summary.resumed_points == 2 and len(summary.rows) == 4
    assert launched == [4.0]  # the finished server setting was not started again
    first = {r.load_point: r for r in summary.rows if r.server_point == "itl_ms=2.0"}
    for label, row in kept.items():
        assert first[label].output_throughput == row["output_throughput"]


def test_a_screened_pair_starts_one_server_setting(fake_engine, fake_artifact, tmp_path) -> None:
    """A pair the quality gate excludes (bench.quality_gated: screen) is served on one setting."""
    settings = FakeSettings(sweep={"itl_ms": [2.0, 40.0]})
    screened = job(fake_engine, fake_artifact, settings)
    screened.screened = "perplexity ratio to the merged model 1.6 beyond <= 1.10"
    summary = run_pair(screened, tmp_path / "out")
    assert summary.screened == screened.screened
    assert summary.server_points == 1 and [s.server_point for s in summary.servers] == [
        "itl_ms=2.0"
    ]
    assert [r.load_point for r in summary.rows] == ["c1", "c4"]
    assert all(r.completed == 8 for r in summary.rows)
    assert no_fake_servers_left(tmp_path)
