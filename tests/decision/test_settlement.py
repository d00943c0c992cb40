"""The status a recommendation says (best_config.json, summary.md's first line, the page): the
decision's own, and a provisional one names what is unsettled and what would settle it.

The fixture tree without the decide stage's rounds leaves chat's decision "not separable" (the
rows alone cannot tell bf16 from llama.cpp: 0.92x [0.82, 1.04]); with them it is a tie settled
by quality. No quality gate here (``quality: {}``), so the case does not hang on its limits.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from tests.report.conftest import (
    CHAT_CONTENDER,
    FIXTURE_PROFILES,
    FIXTURE_SLO,
    FIXTURE_WORKLOADS,
    build_fixture_tree,
)

from quantbench.decision.compare import Contrast
from quantbench.decision.profiles import judge_profiles, judged_candidates
from quantbench.decision.settlement import narrowing, settlement, status_of
from quantbench.outputs import load_inputs
from quantbench.report.build import build_report
from quantbench.report.markdown import md, md_ticks
from quantbench.report.spec import ReportSettings

SETTINGS = ReportSettings(profiles=FIXTURE_PROFILES, quality={})


@pytest.fixture(scope="module")
def unconfirmed(tmp_path_factory: pytest.TempPathFactory):
    """The fixture tree as it stands before the decide stage ran."""
    tree = build_fixture_tree(tmp_path_factory.mktemp("unconfirmed"), confirm=False)
    inputs = load_inputs(tree)
    files = build_report(inputs, slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS)
    profiles = judge_profiles(inputs, FIXTURE_SLO, SETTINGS, workloads=FIXTURE_WORKLOADS)
    return inputs, files, {p.key: p for p in profiles}


@pytest.fixture(scope="module")
def confirmed(fixture_tree: Path):
    inputs = load_inputs(fixture_tree)
    return build_report(inputs, slo=FIXTURE_SLO, settings=SETTINGS, workloads=FIXTURE_WORKLOADS)


def _first_bold(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("**"))


def test_the_status_written_is_the_decisions(unconfirmed, confirmed) -> None:
    """best_config.json said "ok" for a decision that was "not yet separable" (and summary.md's
    bold line "Deploy ..." without a word of it): the status, the headline and summary.md's
    first line now follow decision.status, for every entry."""
    _, files, profiles = unconfirmed
    for out in (files, confirmed):
        for key, entry in out.best_config.items():
            if entry["status"] == "none":
                continue
            provisional = entry["decision"]["status"] == "not separable"
            assert entry["status"] == ("provisional" if provisional else "decided"), key
            assert entry["headline"].startswith("Provisional: ") == provisional, key
            assert bool(entry["unsettled"]) == provisional, key
    chat = files.best_config["chat"]
    assert chat["status"] == "provisional" and chat["decision"]["status"] == "not separable"
    assert confirmed.best_config["chat"]["status"] == "decided"
    assert confirmed.best_config["chat"]["decision"]["status"] == "tie-break"
    assert files.best_config["multi-turn"]["status"] == "decided"
    assert status_of(profiles["chat"].decision) == "provisional"
    assert status_of(None) == "none"


def test_a_provisional_first_line_names_what_is_unsettled(unconfirmed) -> None:
    _, files, _ = unconfirmed
    chat = files.best_config["chat"]
    headline = chat["headline"]
    assert headline.startswith("Provisional: deploy gguf-q4_k_m on llamacpp (default settings")
    assert re.search(
        r"The variant and engine are unsettled: not yet separable from bf16-transformers · "
        r"continuous_batching=on · c4 \(0\.\d{3}x \[0\.\d{3}, 1\.\d{3}\]\)\.$",
        headline,
    ), headline
    (open_,) = chat["unsettled"]
    assert (open_["key"], open_["why"]) == (CHAT_CONTENDER, "not yet separable")
    assert open_["differs"] == ["variant", "engine"]
    assert open_["comparison"] in headline
    # what more measurement would settle it: paired rounds, how far, and the knob
    settle = open_["to_settle"]
    assert settle.startswith("paired rounds in alternation with the leader: its interval, now ±")
    assert "to show it slower" in settle
    assert "The decide stage has not run: set `report.confirm.enabled: true`" in settle
    # summary.md's first bold line is the same line, before anything else of the workload
    text = files.files[Path("summary.md")]
    assert _first_bold(text) == f"**{md(headline)}**"
    first = text.split("## Workload `chat`")[0]
    assert "### `chat`: provisional" in first and "What would settle it" in first
    assert f"- {md_ticks(open_['label'] + ': ' + settle)}" in first
    assert "set `report.confirm.enabled: true`, then `dvc repro`." in first
    # the details keep the same line
    details = text.split("## Workload `chat`")[1]
    assert f"**{md(headline)}**" in details
    # the contender is not called a tie below either
    assert "- not yet separable bf16-transformers · continuous_batching=on · c4: 97.2" in details
    assert "- tied bf16" not in details


def test_a_decided_first_line_says_deploy(confirmed) -> None:
    chat = confirmed.best_config["chat"]
    assert chat["headline"].startswith("Deploy bf16 on transformers (continuous_batching=on")
    text = confirmed.files[Path("summary.md")]
    assert _first_bold(text) == f"**{md(chat['headline'])}**"
    assert "### `chat`: decided" in text.split("## Workload `chat`")[0]


def test_a_contender_whose_slo_is_undecided_is_named_with_what_would_decide_it(
    unconfirmed,
) -> None:
    """A row kept out only by an undecided SLO verdict and not shown slower is a contender: it
    makes the decision provisional, and more requests at its point would settle it."""
    inputs, _, profiles = unconfirmed
    multi = profiles["multi-turn"]
    chat = profiles["chat"]
    pending, _ = judged_candidates(chat.rows, chat.rank_by_goodput, undecided=True)
    (cand,) = pending  # bf16's continuous batching at one stream: one failure in 40
    decision = replace(multi.decision, status="not separable", flagged=[cand])
    profile = replace(multi, decision=decision, rows=[*multi.rows, *chat.rows])
    settled = settlement(inputs, profile)
    assert settled.status == "provisional"
    (open_,) = settled.open
    assert open_.why == "SLO undecided" and open_.key == cand.key
    assert "more requests at its load point would decide" in open_.to_settle
    assert "`workloads.chat.precision.max_requests`" in open_.to_settle
    assert "a contender whose SLO verdict is undecided: " + open_.label in settled.unsettled()


def test_how_far_an_interval_must_narrow() -> None:
    """0.947x [0.869, 1.032] (the default run's chat) is settled as slower once its interval is
    ±5.4 %: it cannot be shown equivalent within ±5 % at that ratio; 0.99x [0.92, 1.07] is
    settled as equivalent first. With rounds behind it, how many rounds that takes."""
    z = 1.959964
    far = Contrast(math.log(0.947), math.log(1.032 / 0.869) / (2 * z), 1e6, "independent rows")
    text = narrowing(far, 0.05, 0.95)
    assert text.startswith("its interval, now ±9.0%, must narrow to ±5.6% to show it slower")
    assert "rounds" not in text  # rows measured apart: more requests do not narrow the drift
    near = Contrast(math.log(0.99), 0.0371, 1e6, "paired over 4 rounds in alternation")
    text = narrowing(near, 0.05, 0.95, rounds=4)
    assert "to show it equivalent within ±5%" in text
    half = z * 0.0371
    need = (math.log(1.05) - abs(math.log(0.99))) / (1.644854 / z)
    assert f"now ±{math.expm1(half):.1%}, must narrow to ±{math.expm1(need):.1%}" in text
    assert f"(about {math.ceil(4 * (half / need) ** 2)} rounds in all" in text
    settled = Contrast(math.log(0.9), 0.01, 1e6, "x")  # already apart: nothing to narrow
    assert narrowing(settled, 0.05, 0.95) == ""
