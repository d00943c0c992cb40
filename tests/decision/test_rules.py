"""The decision rule (quantbench.decision.rules) through the function every caller uses,
quantbench.decision.rows.pick_best: each test here failed on the rule it replaced (ties by
overlapping intervals, settled by any difference in input order)."""

from __future__ import annotations

import math

import numpy as np

from quantbench.decision.rows import decide_rows, pick_best
from quantbench.decision.rules import DecisionSettings


def row(name: str, value: float, rel: float = 0.10, **extra: object) -> dict:
    """A rankable row whose ranked figure has a ±rel batch-means interval."""
    iv = {"value": value, "low": value * (1 - rel), "high": value * (1 + rel), "confidence": 0.95,
          "n": 10, "method": "batch means over 10 slices"}  # fmt: skip
    return {"id": name, "pair": name, "good_output_throughput": value, "output_throughput": value,
            "intervals": {"good_output_throughput": iv}, "rankable": True, **extra}  # fmt: skip


def test_a_row_16_percent_slower_with_better_perplexity_is_not_recommended() -> None:
    """Item 1: with ±10 % intervals the old rule called a configuration truly 16 % slower a tie
    (the intervals overlap) and recommended it for its better perplexity in about 65 % of runs.
    The ratio's interval separates them, or leaves them unresolved with the faster one ahead."""
    rng = np.random.default_rng(11)
    se = math.log(1 / 0.9) / 2.262  # the log standard error of a ±10 % batch-means interval
    slow_wins = 0
    trials = 2000
    for _ in range(trials):
        fast = row("fast", 100 * math.exp(rng.normal(0, se)), ppl=1.038)
        slow = row("slow", 84 * math.exp(rng.normal(0, se)), ppl=1.033)
        best, _, _ = pick_best([fast, slow], rank_by_goodput=True, quality=lambda r: r["ppl"])
        assert best is not None
        slow_wins += best["id"] == "slow"
    assert slow_wins / trials < 0.02, slow_wins / trials


def test_a_difference_below_its_materiality_decides_nothing_whatever_the_order() -> None:
    """Item 2: a perplexity difference of 0.0001 and one byte of peak memory decided outright;
    now each is below its rule's materiality, so the rows stay tied through every rule and the
    highest measured figure decides, in any input order."""
    a = row("a", 100.0, rel=0.002, ppl=1.0332, mem=1_000_000_001)
    b = row("b", 99.9, rel=0.002, ppl=1.0331, mem=1_000_000_000)
    settings = DecisionSettings(drift=0.0)
    for rows in ([a, b], [b, a]):
        best, tied, rule = pick_best(
            rows, True, memory=lambda r: r["mem"], quality=lambda r: r["ppl"], settings=settings
        )
        assert best is not None and best["id"] == "a", rule
        assert [r["id"] for r in tied] == ["b"]
        assert "no tie-break told 2 of them apart" in rule


def test_rows_equal_on_quality_go_on_to_memory_in_any_order() -> None:
    """Item 2: rows equal on the first rule were not passed to the next: the first of them in
    input order won (the same bf16 weights on two engines settled by the pairs' names)."""
    hf = row("bf16-transformers", 100.0, rel=0.002, ppl=1.0, mem=3.0e9, variant="bf16")
    vllm = row("bf16-vllm", 99.8, rel=0.002, ppl=1.0, mem=0.5e9, variant="bf16")
    q4 = row("q4-llamacpp", 99.9, rel=0.002, ppl=1.05, mem=0.2e9, variant="q4")
    settings = DecisionSettings(drift=0.0)
    for rows in ([hf, vllm, q4], [vllm, hf, q4], [q4, hf, vllm]):
        decision, by_key = decide_rows(
            rows, True, memory=lambda r: r["mem"], quality=lambda r: r["ppl"], settings=settings
        )
        assert decision.winner is not None
        assert by_key[decision.winner.key]["id"] == "bf16-vllm", decision.rule
        assert decision.rule.endswith("settled by memory")


def test_passing_over_a_faster_row_says_what_was_traded() -> None:
    fast = row("w8a8-vllm", 100.0, rel=0.01, ppl=1.038)
    good = row("q8-llamacpp", 98.0, rel=0.01, ppl=1.002)
    decision, by_key = decide_rows(
        [fast, good], True, quality=lambda r: r["ppl"], settings=DecisionSettings(drift=0.0)
    )
    assert decision.winner is not None and by_key[decision.winner.key]["id"] == "q8-llamacpp"
    (said,) = decision.tradeoffs
    assert said.startswith("q8-llamacpp over w8a8-vllm: -2.0% good output throughput [")
    assert (
        "for its fidelity (e^KL from the merged model) +3.6% (one reading) above q8-llamacpp's"
        in said
    )
    assert "(quality decided, beyond its materiality of 1%)" in said


def test_unresolved_rows_make_the_decision_not_separable() -> None:
    lead = row("a", 100.0, rel=0.10)
    close = row("b", 97.0, rel=0.10)
    decision, _ = decide_rows([lead, close], True)
    assert decision.status == "not separable"
    assert [c.pair for c in decision.unresolved] == ["b"]
    assert len(decision.contenders) == 2


# -- the statistician's review (issue 56) -------------------------------------------------------


def test_a_trade_off_quotes_the_paired_rounds_that_made_the_tie() -> None:
    """Item 1: the rounds in alternation showed the two rows equivalent (0.992x [0.978, 1.006]),
    and quality chose the slower one; the trade-off quoted the unpaired rows' -8.0 % [...]
    instead of what the rounds measured."""
    from quantbench.decision.compare import Contrast

    fast = row("w8a8-vllm", 100.0, rel=0.10, ppl=1.038)
    good = row("q8-llamacpp", 92.0, rel=0.10, ppl=1.002)
    se = math.log(1.006 / 0.978) / (2 * 1.959964)
    paired = Contrast(math.log(0.992), se, 1e6, "paired over 2 rounds in alternation")
    decision, _ = decide_rows(
        [fast, good], True, quality=lambda r: r["ppl"], key=lambda r: r["id"],
        confirmed={("q8-llamacpp", "w8a8-vllm"): paired},
    )  # fmt: skip
    assert decision.winner is not None and decision.winner.key == "q8-llamacpp"
    (said,) = decision.tradeoffs
    assert said.startswith(
        "q8-llamacpp over w8a8-vllm: -0.8% good output throughput [-2.2%, +0.6%]"
    )
    assert "(paired rounds)" in said and "-8.0%" not in said


def test_a_comparison_without_an_interval_on_its_ratio_is_no_verdict() -> None:
    """Item 8: a row whose interval reaches 0 (its low end clipped there) has no log estimate;
    1 % below the leader it was called "slower". Without a ratio's interval it is not yet
    separable, unless the two intervals lie apart, the drift allowed for."""
    from quantbench.decision.rows import candidates
    from quantbench.decision.rules import DecisionSettings, decide

    lead = row("lead", 100.0, rel=0.05)
    near = row("near", 99.0)
    near["intervals"]["good_output_throughput"].update(low=0.0, high=198.0)
    far = row("far", 30.0)
    far["intervals"]["good_output_throughput"].update(low=0.0, high=60.0)
    found, _ = candidates([lead, near, far], "good_output_throughput", key=lambda r: r["id"])
    decision = decide(found, DecisionSettings())
    assert decision.comparisons["near"].contrast is None
    assert decision.comparisons["near"].verdict == "not yet separable"
    assert decision.comparisons["far"].verdict == "slower"
    assert decision.status == "not separable"


def test_a_row_kept_out_only_by_an_undecided_slo_is_carried_as_a_flagged_contender() -> None:
    """Item 10: a row whose SLO verdict is undecided (an interval straddles the limit) dropped
    out of the decision; truly 20 % inside its p90 limit it is undecided in 12-80 % of runs by
    its latency spread. Faster than the leader (or not shown slower), it is carried as a
    flagged contender and the decision is not separable; shown slower, it is left out."""
    from quantbench.decision.rows import candidates
    from quantbench.decision.rules import DecisionSettings, decide

    lead = row("lead", 100.0, rel=0.03)
    pending = row("pending", 130.0, rel=0.03)
    slow = row("slow", 60.0, rel=0.03)
    found, _ = candidates([lead], "good_output_throughput", key=lambda r: r["id"])
    waiting, _ = candidates([pending, slow], "good_output_throughput", key=lambda r: r["id"])
    decision = decide(found, DecisionSettings(), undecided=waiting)
    assert [c.key for c in decision.flagged] == ["pending"]
    assert decision.status == "not separable" and "undecided SLO verdict" in decision.rule
    assert decision.contenders == ["lead", "pending"]
    compared = decision.comparisons["pending"]
    assert compared.verdict == "faster" and "its SLO verdict is undecided" in compared.text(0.95)
    assert decision.comparisons["slow"].verdict == "slower"
    alone = decide(found, DecisionSettings(), undecided=waiting[1:])
    assert alone.flagged == [] and alone.status == "separable"
