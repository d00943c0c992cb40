"""Two variants compared paired: the block bootstrap over both reports' blocks, the exact
McNemar test and Newcombe's interval (by hand and against a published example), and the refusal
of reports that were not measured on the same things."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tests.schemas import examples

from quantbench.quality.compare import (
    NotPairedError,
    compare_heldout,
    compare_perplexity,
    compare_reports,
    mcnemar,
    mcnemar_exact_p,
    newcombe_paired,
)
from quantbench.quality.intervals import BlockSums, token_figures
from quantbench.schemas.quality import QualityReport, ReferenceInfo, TokenBlock

Z95 = 1.959963984540054  # the normal quantile at 0.975


@pytest.fixture(scope="module")
def gptq() -> QualityReport:
    return examples.quality_report("gptq-w4g64")


@pytest.fixture(scope="module")
def q4() -> QualityReport:
    return examples.quality_report("gguf-q4_k_m", 16.894, 0.061, 0.912, 12)


def test_mcnemar_by_hand() -> None:
    """13 questions: 6 right for both, 5 only for a, 1 only for b, 1 for neither. Under no
    difference the 6 discordant ones split as Binomial(6, 1/2): P(X <= 1) = 7/64, twice that."""
    a_ok = [True] * 6 + [True] * 5 + [False] * 1 + [False]
    b_ok = [True] * 6 + [False] * 5 + [True] * 1 + [False]
    result = mcnemar(a_ok, b_ok, 0.95)
    assert (result.both, result.a_only, result.b_only, result.neither) == (6, 5, 1, 1)
    assert result.p_value == pytest.approx(14 / 64, abs=1e-15)
    assert result.difference.value == pytest.approx(4 / 13)
    assert result.difference.n == 13 and "Newcombe" in result.difference.method
    low, high = result.difference.low, result.difference.high
    assert low < 0 < 4 / 13 < high  # not significant, and the interval says so too
    assert mcnemar_exact_p(5, 0) == pytest.approx(2 / 32)  # 5 of 5 one way: 2 * (1/2)^5
    assert mcnemar_exact_p(0, 0) == 1.0


def test_newcombe_and_mcnemar_match_a_published_example() -> None:
    """Cavo et al. (2012) as in Fagerland, Lydersen & Laake, Statistical Analysis of
    Contingency Tables, ch. 8: 59 both, 6 first only, 16 second only, 80 neither. Newcombe's
    square-and-add interval -0.0621 (-0.1186 to -0.0046); the exact conditional McNemar test
    P = 2 * P(X <= 6 | Binomial(22, 1/2)) = 2 * 110056 / 2^22 = 0.052479."""
    low, high = newcombe_paired(59, 6, 16, 80, 0.95)
    assert (round(low, 4), round(high, 4)) == (-0.1186, -0.0046)
    assert mcnemar_exact_p(6, 16) == pytest.approx(2 * 110056 / 2**22, abs=1e-15)


def test_variants_that_answer_alike_still_get_an_honest_interval() -> None:
    """13/13 for both: no discordant question (p = 1), yet 13 questions cannot show the
    accuracies equal: the interval is +-(1 - Wilson's low end for 13/13) = +-z^2/(13 + z^2),
    where the exact conditional interval would collapse to [0, 0]."""
    result = mcnemar([True] * 13, [True] * 13, 0.95)
    half = Z95**2 / (13 + Z95**2)
    assert result.p_value == 1.0 and result.difference.value == 0.0
    assert result.difference.low == pytest.approx(-half, abs=1e-12)
    assert result.difference.high == pytest.approx(half, abs=1e-12)
    assert round(half, 4) == 0.2281


def test_a_variant_against_itself_shows_no_difference(gptq: QualityReport) -> None:
    result = compare_reports(gptq, gptq)
    ratio, kl, top1 = (
        result.perplexity_ratio,
        result.kl_mean_difference,
        result.top1_agreement_difference,
    )
    assert ratio is not None and (ratio.value, ratio.low, ratio.high) == (1.0, 1.0, 1.0)
    assert kl is not None and (kl.low, kl.high) == (0.0, 0.0)
    assert top1 is not None and (top1.low, top1.high) == (0.0, 0.0)
    assert result.heldout is not None and result.heldout.p_value == 1.0
    assert ratio.n == len(gptq.blocks) and ratio.confidence == 0.95


def test_the_comparison_is_the_ratio_of_ratios_and_seeded(
    gptq: QualityReport, q4: QualityReport
) -> None:
    result = compare_reports(gptq, q4)
    assert result == compare_reports(gptq, q4)  # seeded: the same interval again
    ratio = result.perplexity_ratio
    assert ratio is not None and ratio.value == pytest.approx(19.24 / 16.894, rel=1e-9)
    assert ratio.low < ratio.value < ratio.high and ratio.low > 1  # gptq clearly worse
    kl = result.kl_mean_difference
    assert kl is not None and kl.value == pytest.approx(0.182 - 0.061, abs=1e-3)
    assert result.heldout is not None
    assert (result.heldout.a_only, result.heldout.b_only) == (0, 3)  # 9 vs 12 of 13
    assert result.heldout.p_value == pytest.approx(2 / 8)


def test_the_report_stage_asks_for_one_figure_at_a_time(
    gptq: QualityReport, q4: QualityReport
) -> None:
    """compare_perplexity and compare_heldout: what the report's ranking and quality gate ask
    for (the merged weights' report against a variant's: the accuracy it lost)."""
    assert compare_perplexity(gptq, q4) == compare_reports(gptq, q4).perplexity_ratio
    merged = examples.quality_report("bf16", 16.0, 0.0, 1.0, 13)
    lost = compare_heldout(merged, gptq)
    assert (lost.a_only, lost.b_only, lost.both) == (4, 0, 9)
    assert lost.difference.value == pytest.approx(4 / 13)
    assert lost.p_value == pytest.approx(2 / 16)  # 4 of 4 discordant one way
    assert lost.difference.low > 0  # Newcombe: 4 lost of 13 is a loss at 95 %
    short = gptq.model_copy(update={"blocks": gptq.blocks[:1], "tokens": gptq.blocks[0].tokens})
    with pytest.raises(ValueError, match="fewer than 2 token blocks"):
        compare_perplexity(short, short)


def _shifted(report: QualityReport, nats_per_token: float, seed: int) -> QualityReport:
    """The same variant a little worse on every block, plus a little noise of its own."""
    noise = np.random.default_rng(seed).normal(0.0, 0.3, len(report.blocks))
    blocks = [
        b.model_copy(update={"variant_nll": b.variant_nll + nats_per_token * b.tokens + e})
        for b, e in zip(report.blocks, noise, strict=True)
    ]
    return report.model_copy(update={"name": "worse", "blocks": blocks})


def test_pairing_separates_what_the_reports_own_intervals_cannot(gptq: QualityReport) -> None:
    """B is A plus 0.005 nats a token: their own ratio intervals overlap (each carries its
    variant's noise against the reference), the paired comparison excludes 1."""
    worse = _shifted(gptq, 0.005, seed=2)
    own = [token_figures(BlockSums.of(r.blocks), 0.95) for r in (gptq, worse)]
    assert own[0] is not None and own[1] is not None
    assert own[1].perplexity_ratio.low < own[0].perplexity_ratio.high  # they overlap
    ratio = compare_reports(worse, gptq).perplexity_ratio
    assert ratio is not None and 1.0 < ratio.low < math.exp(0.005) < ratio.high


def _drop_last_block(r: QualityReport) -> dict[str, Any]:
    return {"blocks": r.blocks[:-1], "tokens": r.tokens - r.blocks[-1].tokens}


def _merge_last_blocks(r: QualityReport) -> dict[str, Any]:
    *head, x, y = r.blocks
    merged = TokenBlock(
        tokens=x.tokens + y.tokens, reference_nll=x.reference_nll + y.reference_nll,
        variant_nll=x.variant_nll + y.variant_nll, kl=x.kl + y.kl,
        top1_agreements=x.top1_agreements + y.top1_agreements,
    )  # fmt: skip
    return {"blocks": [*head, merged]}


def _another_reference_nll(r: QualityReport) -> dict[str, Any]:
    first = r.blocks[0]
    moved = first.model_copy(update={"reference_nll": first.reference_nll + 2.0})
    return {"blocks": [moved, *r.blocks[1:]]}


def _other_questions(r: QualityReport) -> dict[str, Any]:
    answers = list(r.heldout.answers)
    answers[0] = answers[0].model_copy(update={"question": "Another question?"})
    return {"heldout": r.heldout.model_copy(update={"answers": answers})}


# case -> (the change to one report, what the refusal names, whether the questions differ)
MISMATCHES: dict[str, tuple[Callable[[QualityReport], dict[str, Any]], str, bool]] = {
    "fewer tokens": (_drop_last_block, "scored tokens", False),
    "other blocks": (_merge_last_blocks, "block sizes", False),
    "other reference": (
        lambda r: {"reference": ReferenceInfo(path="models/other", is_variant_source=True)},
        "reference model",
        False,
    ),
    "other ids": (
        lambda r: {"eval_text": r.eval_text.model_copy(update={"ids_sha256": "0" * 64})},
        "token ids",
        False,
    ),
    "other settings": (
        lambda r: {"settings": {**r.settings, "stride": 128}},
        "evaluate settings",
        False,
    ),
    "other reference weights": (_another_reference_nll, "reference's NLL", False),
    "no blocks": (lambda r: {"blocks": []}, "no token blocks", False),
    "other questions": (_other_questions, "held-out questions", True),
    "longer answers": (
        lambda r: {"settings": {**r.settings, "heldout_max_new_tokens": 64}},
        "heldout_max_new_tokens",
        True,
    ),
}


@pytest.mark.parametrize("case", MISMATCHES, ids=list(MISMATCHES))
def test_reports_that_do_not_correspond_are_refused(
    case: str, gptq: QualityReport, q4: QualityReport
) -> None:
    change, message, questions = MISMATCHES[case]
    other = q4.model_copy(update=change(q4))
    with pytest.raises(NotPairedError, match=message) as info:
        compare_reports(gptq, other)
    assert isinstance(info.value, ValueError)
    for compare in (compare_reports, compare_perplexity):
        with pytest.raises(NotPairedError, match=message):
            compare(other, gptq)
    if questions:
        with pytest.raises(NotPairedError, match=message):
            compare_heldout(other, gptq)
    else:  # the answers need no token blocks: they still compare, question by question
        assert compare_heldout(other, gptq) == compare_heldout(q4, gptq)


def test_reports_at_two_confidences_need_one_named(gptq: QualityReport, q4: QualityReport) -> None:
    other = q4.model_copy(update={"settings": {**q4.settings, "confidence": 0.9}})
    with pytest.raises(ValueError, match="pass one confidence"):
        compare_reports(gptq, other)
    result = compare_reports(gptq, other, confidence=0.8)
    assert result.perplexity_ratio is not None and result.perplexity_ratio.confidence == 0.8
    # a report older than the setting counts at its default, 0.95
    older = q4.model_copy(update={"settings": {"context_length": 512, "stride": 256}})
    assert compare_heldout(older, gptq).difference.confidence == 0.95
