"""`quantbench plan`: the bench's points timed from predictions, overrides as `dvc exp run -S`
takes them, and the shipped full-space profile kept valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.bench.duration import (
    SERVER_CHECK_S,
    ProbeShape,
    TaskShape,
    TrafficShape,
    plan_pair,
)
from quantbench.bench.spec import BenchSettings
from quantbench.cli.plan import profile_overrides, with_overrides
from quantbench.config import parse_config
from quantbench.errors import UserError
from quantbench.schemas.roofline import ConcurrencyPoint, PairPrediction
from quantbench.slo import NO_SLO, Slo
from quantbench.workloads.spec import WorkloadSpec

REPO = Path(__file__).resolve().parents[2]


def _point(c: int, e2e_s: float, ttft_ms: float = 100.0, itl_ms: float = 20.0) -> ConcurrencyPoint:
    return ConcurrencyPoint(
        concurrency=c, ttft_ms=ttft_ms, itl_ms=itl_ms, itl_first_ms=itl_ms, itl_last_ms=itl_ms,
        itl_decode_only_ms=itl_ms, e2e_s=e2e_s, output_tps=c * 32 / e2e_s, input_tps=1.0,
        request_rate=c / e2e_s, decode_bound="memory", decode_intensity=1.0, kv_cache_gb=0.0,
        fits_memory=True, meets_ttft_slo=True, meets_itl_slo=True,
    )  # fmt: skip


def _prediction(points: list[ConcurrencyPoint]) -> PairPrediction:
    return PairPrediction(
        pair="p-e", variant="p", engine="e", server_point="default", workload="chat",
        hardware_name="this", max_batch=None, input_len=16, output_len=32, points=points,
    )  # fmt: skip


CHAT = WorkloadSpec.model_validate(
    {
        "prompts": {"source": "random", "input_len": 16, "output_len": 32},
        "load": [{"kind": "concurrency", "concurrency": 1}, {"kind": "rate", "rate": 2.0}],
        "num_requests": 10,
        "warmup_requests": 2,
    }
)


def test_a_grid_point_takes_its_conversations_times_e2e_over_its_streams():
    prediction = _prediction([_point(1, 2.0), _point(4, 4.0)])
    plan = plan_pair(
        "p-e", ["default"], {"chat": CHAT}, {"chat": TrafficShape()}, [prediction],
        BenchSettings(), NO_SLO, startup_s=30.0,
    )  # fmt: skip
    closed, opened = plan.points
    assert (closed.load_point, closed.conversations) == ("c1", 12)
    assert closed.seconds == pytest.approx(12 * 2.0 / 1)
    # open loop at 2 a second: 12 conversations in 6 s, then the last one drains (E2E at c=1)
    assert opened.seconds == pytest.approx(12 / 2.0 + 2.0)
    assert plan.seconds == pytest.approx(24.0 + 8.0 + 30.0 + SERVER_CHECK_S)
    # a conversation of 3 turns with 1 s thinks: 3 E2E + 2 s per stream
    three = plan_pair(
        "p-e", ["default"], {"chat": CHAT}, {"chat": TrafficShape(3.0, 1.0)}, [prediction],
        BenchSettings(), NO_SLO, startup_s=0.0,
    )  # fmt: skip
    assert three.points[0].seconds == pytest.approx(12 * (3 * 2.0 + 2 * 1.0))


def test_the_served_task_is_timed_once_per_pair_at_its_concurrency_pace():
    """13 questions of up to 32 tokens, one at a time: 13 x (TTFT 100 ms + 32 x TPOT 20 ms),
    on the first server only; four at a time at the pace predicted for four streams (TPOT
    40 ms), a quarter of that per question; two at a time where only one and four streams are
    predicted: priced as one (never faster than a prediction says)."""
    prediction = _prediction([_point(1, 2.0), _point(4, 4.0, itl_ms=40.0)])
    two = prediction.model_copy(update={"server_point": "other"})
    args = ({"chat": CHAT}, {"chat": TrafficShape()}, [prediction, two], BenchSettings(), NO_SLO)
    without = plan_pair("p-e", ["default", "other"], *args, startup_s=30.0)
    one = plan_pair("p-e", ["default", "other"], *args, startup_s=30.0, task=TaskShape(13, 32, 1))
    assert one.task_s == pytest.approx(13 * (0.1 + 32 * 0.02))
    assert one.seconds == pytest.approx(without.seconds + one.task_s)
    four = plan_pair("p-e", ["default"], *args, startup_s=30.0, task=TaskShape(13, 32, 4))
    assert four.task_s == pytest.approx(13 * (0.1 + 32 * 0.04) / 4)
    both = plan_pair("p-e", ["default"], *args, startup_s=30.0, task=TaskShape(13, 32, 2))
    assert both.task_s == pytest.approx(one.task_s)
    unknown = plan_pair("p-e", ["default"], {"chat": CHAT}, {}, [], BenchSettings(), NO_SLO,
                        startup_s=1.0, task=TaskShape(13, 32, 1))  # fmt: skip
    assert unknown.task_s is None and unknown.seconds is None
    # the answers' own length where it is known (the reference answers, about 15 tokens where
    # the cap is 32), never above the cap
    short = plan_pair("p-e", ["default"], *args, startup_s=30.0,
                      task=TaskShape(13, 32, 1, answer_tokens=15.0))  # fmt: skip
    assert short.task_s == pytest.approx(13 * (0.1 + 15 * 0.02))
    long = plan_pair("p-e", ["default"], *args, startup_s=30.0,
                     task=TaskShape(13, 32, 1, answer_tokens=40.0))  # fmt: skip
    assert long.task_s == pytest.approx(one.task_s)


def test_the_plan_prices_the_served_task_at_the_reference_answers_length(tmp_path: Path) -> None:
    """Counted with the model's tokenizer, each with its stop token, capped; without a
    tokenizer, None (the cap is priced and the plan says so)."""
    from quantbench.cli.plan import _answer_tokens

    tokenizer = tmp_path / "tokenizer.json"
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "capital": 2, "is": 3}, "[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tokenizer))
    assert _answer_tokens(tokenizer, ["the capital is", "the"], 32) == pytest.approx((4 + 2) / 2)
    assert _answer_tokens(tokenizer, ["the capital is"], 2) == pytest.approx(2.0)
    assert _answer_tokens(tmp_path / "none", ["the"], 32) is None
    assert _answer_tokens(tokenizer, [], 32) is None


def test_the_probe_is_timed_on_its_setting_and_added_to_the_pair():
    """The bench probes its server for the estimate before its points: 7 requests of 32 tokens
    alone (TTFT 100 ms + 32 x 20 ms each), then 2, 3 and 4 together, each group as long as one
    request at the pace predicted for its streams (2 and 3: one stream's, the highest predicted
    not above them; 4: TPOT 40 ms), on the setting it probes; no probe asked costs nothing."""
    default = _prediction([_point(1, 2.0), _point(4, 4.0, itl_ms=40.0)])
    slow = _prediction([_point(1, 9.0, itl_ms=90.0)]).model_copy(update={"server_point": "one"})
    args = ({"chat": CHAT}, {"chat": TrafficShape()}, [slow, default], BenchSettings(), NO_SLO)
    without = plan_pair("p-e", ["one", "default"], *args, startup_s=30.0)
    probe = ProbeShape(alone=7, batch=4, output_tokens=32, server_point="default")
    probed = plan_pair("p-e", ["one", "default"], *args, startup_s=30.0, probe=probe)
    alone, four = 0.1 + 32 * 0.02, 0.1 + 32 * 0.04
    assert probed.probe_s == pytest.approx(7 * alone + 2 * alone + four)
    assert probed.seconds == pytest.approx(without.seconds + probed.probe_s)
    assert without.probe_s == 0.0
    unknown = plan_pair("p-e", ["x"], {"chat": CHAT}, {}, [], BenchSettings(), NO_SLO,
                        startup_s=1.0, probe=probe)  # fmt: skip
    assert unknown.probe_s is None and unknown.seconds is None


def test_a_search_is_timed_over_the_loads_it_would_try_as_predicted():
    # TTFT passes the 2 s limit up to 3 streams: the search grows 1, 2, 4, bisects to 3, confirms
    points = [_point(c, 1.0 + c, ttft_ms=500.0 * c) for c in range(1, 17)]
    bench = BenchSettings(mode="search", search={"start": 1, "max": 16, "num_requests": 16})
    plan = plan_pair(
        "p-e", ["default"], {"chat": CHAT}, {"chat": TrafficShape()},
        [_prediction(points)], bench, Slo("ttft:p90<=1.6s"), startup_s=0.0,
    )  # fmt: skip
    loads = [p.load_point for p in plan.points]
    assert loads[:4] == ["c1", "c2", "c4", "c3"] and set(loads) == {"c1", "c2", "c3", "c4"}
    first = plan.points[0]
    assert first.seconds == pytest.approx((16 + 2) * 2.0 / 1)


def test_a_pair_without_a_prediction_is_counted_not_timed():
    plan = plan_pair(
        "p-e", ["default"], {"chat": CHAT}, {}, [], BenchSettings(), NO_SLO, startup_s=1.0
    )
    assert len(plan.points) == 2 and plan.seconds is None


def test_overrides_use_dvc_s_own_syntax_and_say_what_is_wrong(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("bench:\n  mode: grid\n  pairs: {a: {variant: a, engine: vllm}}\n")
    found = with_overrides(params, ["bench.mode=search", "+bench.pairs.a.settings={parallel: 2}"])
    assert found["bench"]["mode"] == "search"
    assert found["bench"]["pairs"]["a"]["settings"] == {"parallel": 2}
    assert params.read_text().count("grid") == 1  # the file itself is left as it was
    with pytest.raises(UserError, match=r"(?s)Could not override 'bench.nope'.*\+bench.nope"):
        with_overrides(params, ["bench.nope=1"])


def test_the_full_space_profile_is_valid_params(tmp_path):
    overrides = profile_overrides(REPO / "profiles" / "full-space.yaml")
    params = with_overrides(REPO / "params.yaml", overrides)
    config = parse_config(params)
    assert config.bench.mode == "search" and len(config.bench.pairs) >= 7
    for name in config.bench.pairs:
        assert len(config.pair_settings(name).sweep_points()) > 1, name  # every pair sweeps
    bad = tmp_path / "bad.yaml"
    bad.write_text("overrides: bench.mode=search\n")
    with pytest.raises(UserError, match="needs `overrides:`"):
        profile_overrides(bad)


def test_the_table_says_what_it_could_not_time():
    from quantbench.bench.duration import PairPlan, PointPlan, render

    timed = PairPlan("a-e", 0.0, [PointPlan("default", "chat", "c1", 10, 600.0)])
    untimed = PairPlan("b-e", 0.0, [PointPlan("default", "chat", "c1", 10, None)])
    text = render([timed, untimed])
    assert "| a-e | 1 | 1 | 10 | – | 10.2 min |" in text and "| b-e | 1 | 1 | 10 | – | ? |" in text
    assert "Expected bench time: 10.2 min plus b-e (no prediction)" in text
    assert "Expected bench time: unknown: b-e (no prediction)" in render([untimed])


def test_the_plan_takes_a_params_overlay_by_its_name_and_its_old_one() -> None:
    """`--overlay` (a params overlay: docs/GLOSSARY.md); `--profile`, its old name, still works."""
    import argparse

    from quantbench.cli.plan import add_plan_arguments

    parser = argparse.ArgumentParser()
    add_plan_arguments(parser)
    for flag in ("--overlay", "--profile"):
        assert parser.parse_args([flag, "profiles/full-space.yaml"]).overlay == Path(
            "profiles/full-space.yaml"
        )


def test_a_point_is_priced_where_its_verdict_would_stop_it():
    """A point of the early-pass design stops at 36 requests when it passes, and any point at
    its first decisive look when it clearly fails: the plan prices each where the prediction
    puts it, else the cap (88)."""
    spec = WorkloadSpec.model_validate(
        {
            "prompts": {"source": "random", "input_len": 16, "output_len": 32},
            "load": [{"kind": "concurrency", "concurrency": 1}],
            "precision": {"min_requests": 12, "max_requests": 88, "early_pass": True},
            "warmup_requests": 2,
        }
    )
    slo = Slo("ttft:p90<=2s; tpot:p50<=150ms; error_rate<=0.1")
    args = ({"chat": spec}, {"chat": TrafficShape()})
    met = _prediction([_point(1, 1.0, ttft_ms=100.0, itl_ms=20.0)])
    plan = plan_pair("p-e", ["default"], *args, [met], BenchSettings(), slo, startup_s=0.0)
    assert plan.points[0].conversations == 36 + 2  # the first look and the warm-up
    near = _prediction([_point(1, 1.0, ttft_ms=2500.0, itl_ms=20.0)])  # 1.25x: may pass
    plan = plan_pair("p-e", ["default"], *args, [near], BenchSettings(), slo, startup_s=0.0)
    assert plan.points[0].conversations == 88 + 2
    # twice its TTFT limit: a fail shown at the first look that can (3 requests all above the
    # limit bound a p90 from below at 95 % over 22 looks; looks come every 4)
    missed = _prediction([_point(1, 1.0, ttft_ms=4000.0, itl_ms=20.0)])
    plan = plan_pair("p-e", ["default"], *args, [missed], BenchSettings(), slo, startup_s=0.0)
    assert plan.points[0].conversations == 4 + 2
    one_look = spec.model_copy(
        update={"precision": spec.precision.model_copy(update={"early_pass": False})}
    )
    plan = plan_pair("p-e", ["default"], {"chat": one_look}, {"chat": TrafficShape()}, [met],
                     BenchSettings(), slo, startup_s=0.0)  # fmt: skip
    assert plan.points[0].conversations == 88 + 2


def test_a_point_the_race_stops_is_priced_where_the_race_stops_it():
    """Four streams first, predicted to pass at 4 conversations in 1.2 s (3.3 a second); one
    stream after them at 1 a second: the race stops it at its first look, on its one stream's
    ceiling (4 requests), rather than at its early pass (36). Without the race, or listed first,
    or close to the leader, it is not."""

    def spec_of(*streams: int):
        return WorkloadSpec.model_validate(
            {
                "prompts": {"source": "random", "input_len": 16, "output_len": 32},
                "load": [{"kind": "concurrency", "concurrency": c} for c in streams],
                "precision": {"min_requests": 12, "max_requests": 88, "early_pass": True},
                "warmup_requests": 2,
            }
        )

    slo = Slo("ttft:p90<=2s; tpot:p50<=150ms; error_rate<=0.1")
    fast = _prediction([_point(1, 1.0), _point(4, 1.2)])
    shapes = {"chat": TrafficShape()}

    def conversations(spec, prediction, bench):
        plan = plan_pair("p-e", ["default"], {"chat": spec}, shapes, [prediction], bench, slo,
                         startup_s=0.0)  # fmt: skip
        return [p.conversations for p in plan.points]

    assert conversations(spec_of(4, 1), fast, BenchSettings()) == [36 + 2, 4 + 2]
    assert conversations(spec_of(4, 1), fast, BenchSettings(race=False)) == [36 + 2, 36 + 2]
    assert conversations(spec_of(1, 4), fast, BenchSettings()) == [36 + 2, 36 + 2]
    # four streams that batch badly: 4 in 3.5 s, 1.14 a second, within 1.5x of one stream
    slow = _prediction([_point(1, 1.0), _point(4, 3.5)])
    assert conversations(spec_of(4, 1), slow, BenchSettings()) == [36 + 2, 36 + 2]


def test_the_plan_prices_a_screened_pair_as_its_bench_stage_runs_it(tmp_path: Path, capsys) -> None:
    """With the evaluate stage's report of a variant the quality gate excludes, the plan prices
    its pair on one server setting (Q8_0 on llama.cpp sweeps two), each workload's first load
    point (chat's one stream is not run), and says why."""
    import argparse

    from tests.schemas import examples

    from quantbench.cli.plan import add_plan_arguments, run_plan
    from quantbench.schemas import io as schema_io

    parser = argparse.ArgumentParser()
    add_plan_arguments(parser)
    quality = tmp_path / "quality"
    args = parser.parse_args(["--calibration", str(tmp_path / "none.json"),
                              "--quality", str(quality)])  # fmt: skip

    def row() -> list[str]:
        assert run_plan(args) == 0
        out = capsys.readouterr().out
        line = next(x for x in out.splitlines() if x.startswith("| gguf-q8_0-llamacpp |"))
        return [*(c.strip() for c in line.split("|")[2:4]), out]

    servers, points, _ = row()
    assert (servers, points) == ("2", "6")
    report = examples.quality_report("gguf-q4_k_m", 26.0, 0.3, 0.7, 5)  # KL 0.3, limit 0.15
    report = report.model_copy(update={"name": "gguf-q8_0"})
    schema_io.write(quality / "gguf-q8_0.json", report)
    servers, points, out = row()
    assert (servers, points) == ("1", "2")  # one setting, each workload's first load
    assert "gguf-q8_0-llamacpp: screened, mean KL divergence" in out
    line = next(x for x in out.splitlines() if x.startswith("| gguf-q8_0-llamacpp |"))
    assert line.split("|")[5].strip() == "–"  # no served task: a screened pair is not asked
