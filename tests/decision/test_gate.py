"""The quality gate judged from one variant's report: what a bench stage can know before it runs."""

from __future__ import annotations

import math

import pytest
from tests.schemas import examples

from quantbench.decision.gate import check_limits, quality_gate, shown_unrankable


def test_a_variant_shown_beyond_a_limit_is_unrankable_before_its_bench() -> None:
    gptq = examples.quality_report("gptq-w4g64", ppl=19.24)  # ratio 1.20 to the merged 16.0
    ratio = gptq.intervals.perplexity_ratio
    assert ratio is not None and ratio.low > 1.10
    why = shown_unrankable(gptq, {"perplexity_ratio": 1.10})
    assert why is not None and "beyond report.quality.perplexity_ratio <= 1.100" in why
    # the decision's own gate says the same
    assert quality_gate(gptq, {"perplexity_ratio": 1.10}) == why


def test_a_variant_within_or_not_yet_judged_is_measured_in_full() -> None:
    close = examples.quality_report("gguf-q4_k_m", 16.3, 0.02, 0.97, 12)
    assert shown_unrankable(close, {"perplexity_ratio": 1.10}) is None
    # a limit that needs the merged weights' report is left to the decision (never screened on
    # a figure missing here), and no report at all screens nothing
    gptq = examples.quality_report("gptq-w4g64", ppl=19.24)
    assert shown_unrankable(gptq, {"heldout_accuracy_loss": 0.0}) is None
    assert quality_gate(gptq, {"heldout_accuracy_loss": 0.0}) is not None  # the decision: gated
    assert shown_unrankable(None, {"perplexity_ratio": 1.10}) is None
    assert shown_unrankable(gptq, {}) is None


def test_a_variant_straddling_a_limit_cannot_be_ranked_either() -> None:
    gptq = examples.quality_report("gptq-w4g64", ppl=19.24)
    ratio = gptq.intervals.perplexity_ratio
    assert ratio is not None
    between = (ratio.low + ratio.value) / 2  # inside the interval: possibly within, not shown
    why = shown_unrankable(gptq, {"perplexity_ratio": between})
    assert why is not None and "not shown within" in why


def test_limits_are_validated() -> None:
    assert check_limits({"perplexity_ratio": 1.1}) == {"perplexity_ratio": 1.1}
    with pytest.raises(ValueError, match="unknown figure 'ppl'"):
        check_limits({"ppl": 1.1})
    with pytest.raises(ValueError, match="below 1 can never be shown"):
        check_limits({"perplexity_ratio": 0.9})


def test_the_default_gate_ranks_what_tracks_fidelity_not_perplexity() -> None:
    """Issue 55: round-to-nearest kept the merged perplexity (ratio 0.998) while being the least
    faithful copy (KL 0.876, 57.5 % top-1); AWQ lost perplexity (1.430) but kept the merged
    model's predictions better (KL 0.404). The default gate judges KL and top-1, so the copy
    that merely drifts back towards the base model's perplexity is not ranked for it."""
    from quantbench.report.spec import ReportSettings

    limits = ReportSettings().quality
    assert "perplexity_ratio" not in limits and {"kl_mean", "top1_agreement"} <= set(limits)
    naive = examples.quality_report("gptq-w4g64", 15.97, 0.876, 0.575, 12)  # as RTN: ratio 0.998
    faithful = examples.quality_report("gguf-q4_k_m", 17.5, 0.098, 0.84, 12)  # ratio 1.09
    assert naive.perplexity_ratio < 1.0 < faithful.perplexity_ratio
    assert "mean KL divergence from the merged model" in (shown_unrankable(naive, limits) or "")
    assert shown_unrankable(faithful, limits) is None


def test_the_quality_tie_break_compares_e_to_the_kl() -> None:
    from quantbench.decision.gate import fidelity_figure

    report = examples.quality_report("gguf-q4_k_m", 17.5, 0.098, 0.84, 12)
    fig = fidelity_figure(report)
    kl = report.intervals.kl_mean
    assert fig is not None and kl is not None
    assert fig.value == pytest.approx(math.exp(kl.value)) and kl.value == pytest.approx(
        0.098, rel=0.01
    )
    assert (fig.low, fig.high) == pytest.approx((math.exp(kl.low), math.exp(kl.high)))
    assert fidelity_figure(None) is None
