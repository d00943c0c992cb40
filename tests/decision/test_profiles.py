"""Judging per workload (quantbench.decision.profiles) as the statistics need it: what is a tie
and what a contender, the drift the rounds measured, the figure a rerun will see, a row whose
SLO is still undecided."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from tests.report.conftest import FIXTURE_SLO, FIXTURE_WORKLOADS, build_fixture_tree

from quantbench.decision.profiles import (
    confirmed_contrasts,
    decide_judged,
    decision_inputs,
    judge_profiles,
)
from quantbench.outputs import load_inputs
from quantbench.report.spec import ReportSettings
from quantbench.report.tables import ranking
from quantbench.schemas.decide import ConfirmFile, Duel, Measured, Round

BF16, GGUF = "bf16-transformers", "gguf-q4_k_m-llamacpp"
CONTENDER = f"{BF16}/continuous_batching=on/chat/c4"
LEADER = f"{GGUF}/default/chat/c4"


@pytest.fixture(scope="module")
def inputs(fixture_tree: Path):
    return load_inputs(fixture_tree)


def judged(inputs, settings: ReportSettings | None = None):
    return {p.key: p for p in judge_profiles(inputs, FIXTURE_SLO, settings or ReportSettings(),
                                             workloads=FIXTURE_WORKLOADS)}  # fmt: skip


def test_a_row_not_yet_separable_is_a_contender_not_a_tie(tmp_path: Path) -> None:
    """Item 1: without the decide stage's rounds, bf16 cannot be separated from the leading
    llama.cpp row (nor shown equivalent to it); the cross-workload ranking labelled it "(tie)".
    A tie is a row shown equivalent: this one is a contender, and the ranking says neither."""
    inputs = load_inputs(build_fixture_tree(tmp_path, confirm=False))
    chat = judged(inputs)["chat"]
    assert chat.decision is not None and chat.decision.status == "not separable"
    assert chat.ties == []
    assert [r.key for r in chat.unresolved] == [CONTENDER]
    cells = {r.pair: r.cells["chat"] for r in ranking(inputs, [chat])}
    assert cells[GGUF].winner and not cells[BF16].tie


def _noisy(duel: Duel) -> Duel:
    """The same duel on a noisier machine: each side's rounds 12 % apart."""
    rounds = []
    for r, f in zip(duel.rounds, (0.94, 1.06), strict=False):

        def moved(m: Measured, by: float) -> Measured:
            assert m.figure is not None
            fig = m.figure
            return m.model_copy(
                update={
                    "figure": fig.model_copy(
                        update={"value": fig.value * by, "low": fig.low * by, "high": fig.high * by}
                    )
                }
            )

        rounds.append(Round(index=r.index, order=r.order, a=moved(r.a, f), b=moved(r.b, f)))
    return duel.model_copy(update={"rounds": rounds})


def test_the_rows_comparisons_carry_the_drift_the_rounds_measured(inputs) -> None:
    """Item 3: report.drift (4 %) was a constant. The decide stage's rounds measure each row
    again at different minutes; where their spread beyond their own errors says the machine
    drifts more, every comparison of rows measured apart carries that, and says where from."""
    assert inputs.confirm is not None
    quiet = decision_inputs(inputs, ReportSettings(), 0.95, "chat", "default")
    assert quiet.settings.drift == 0.04 and quiet.settings.drift_source.startswith("report.drift")
    noisy_confirm = ConfirmFile.model_validate(
        {**inputs.confirm.model_dump(), "duels": [_noisy(d).model_dump()
                                                  for d in inputs.confirm.duels]}
    )  # fmt: skip
    noisy = dataclasses.replace(inputs, confirm=noisy_confirm)
    how = decision_inputs(noisy, ReportSettings(), 0.95, "multi-turn", "default")
    assert how.settings.drift > 0.1
    assert "measured over 4 measurements of 2 rows" in how.settings.drift_source
    chat = judged(noisy)["chat"]
    assert chat.decision is not None
    texts = [c.text(0.95) for c in chat.decision.comparisons.values() if c.source == "rows"]
    assert texts and all(f"drift {how.settings.drift:.1%} added" in t for t in texts)


def test_the_expected_figure_is_what_a_rerun_will_see(inputs) -> None:
    """Item 4: best_config's expected figure was the winner's row interval: no drift, no
    selection. The rerun figure is chat's winner's from its confirming rounds (their mean),
    multi-turn's from its row, simultaneous over the rows it was chosen from and wider than
    the row's own."""
    by_key = judged(inputs)
    for key, how in (("chat", "confirming rounds"), ("multi-turn", "simultaneous over the")):
        profile = by_key[key]
        assert profile.best is not None and profile.rerun is not None
        assert how in profile.rerun.method and "drift 4.0% included" in profile.rerun.method
    assert inputs.confirm is not None
    rounds = [r.a.figure.value for r in inputs.confirm.duels[0].rounds if r.a.figure]
    chat = by_key["chat"].rerun
    assert chat is not None and chat.value == pytest.approx(math.prod(rounds) ** (1 / len(rounds)))
    multi = by_key["multi-turn"]
    row = multi.best.row.intervals["good_output_throughput"]  # type: ignore[union-attr]
    assert multi.rerun.high / multi.rerun.low > row.high / row.low  # type: ignore[union-attr]
    assert multi.rerun.value == pytest.approx(row.value)  # type: ignore[union-attr]
    assert by_key["chat"].agreement is not None and 0 <= by_key["chat"].agreement <= 1


def test_a_row_whose_slo_is_undecided_is_carried_as_a_flagged_contender(inputs) -> None:
    """Item 10: the row with the highest figure, its SLO verdict undecided, dropped out of the
    ranking and was never named; it is carried as a flagged contender, and the decision is not
    separable until its SLO is decided."""
    chat = judged(inputs)["chat"]
    assert chat.best is not None and chat.decision is not None
    metric = "good_output_throughput"
    top = max((r for r in chat.rows if r.rankable), key=lambda r: r.row.metric(metric) or 0)
    waiting = dataclasses.replace(
        top,
        row=top.row.model_copy(
            update={
                "rankable": False,
                "slo_verdict": "undecided",
                "slo_passed": False,
                "flags": ["SLO undecided: an interval straddles a limit, or too few requests"],
            }
        ),
    )
    others = [r for r in chat.rows if r.key != top.key and r.variant not in chat.gated]
    decision, rows = decide_judged([*others, waiting], True, chat.how)
    assert [c.key for c in decision.flagged] == [top.key] and top.key in rows
    assert decision.status == "not separable" and top.key in decision.contenders
    assert "its SLO verdict is undecided" in decision.comparisons[top.key].text(0.95)
    assert math.isfinite(decision.comparisons[top.key].contrast.ratio)  # type: ignore[union-attr]


def test_rounds_short_of_a_block_leave_the_screening_standing(tmp_path) -> None:
    """A duel the budget cut after one round: that round alone would take the drift between its
    two measurements for a difference, so the screening's comparison stands."""
    from quantbench.schemas import io as schema_io
    from quantbench.schemas.decide import ConfirmFile

    root = build_fixture_tree(tmp_path)
    path = root / ConfirmFile.OUTPUT
    confirm = schema_io.read(path, ConfirmFile)
    (duel,) = confirm.duels
    cut = confirm.model_copy(
        update={"duels": [duel.model_copy(update={"rounds": duel.rounds[:1]})]}
    )
    schema_io.write(path, cut)
    inputs = load_inputs(root)
    assert confirmed_contrasts(inputs, "chat") == {}
    by_key = {p.key: p for p in judge_profiles(inputs, FIXTURE_SLO, ReportSettings(),
                                                workloads=FIXTURE_WORKLOADS)}  # fmt: skip
    chat = by_key["chat"]
    assert chat.decision is not None and chat.decision.status == "not separable"
    assert chat.decision.comparisons[chat.decision.unresolved[0].key].source == "rows"
