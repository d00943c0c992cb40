"""Every quality figure's interval: the paired block bootstrap (seeded, covering at its
confidence when neighbouring tokens are correlated, exactly [1, 1] for a model against itself),
Clopper-Pearson by hand, and the evaluation's report carrying both."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from tests.schemas import examples

from quantbench.quality.intervals import (
    BlockSums,
    block_sums,
    clopper_pearson,
    quality_intervals,
    token_figures,
    token_ids_sha256,
)
from quantbench.schemas.common import HeldoutAnswer, HeldoutScore
from quantbench.schemas.quality import EvalText

TRUE_DELTA = 0.05  # the simulated variant's true mean NLL excess: true ratio exp(0.05)


def ar1(rng: np.random.Generator, reps: int, n: int, phi: float, sd: float) -> np.ndarray:
    """``reps`` stationary AR(1) series of ``n`` tokens: neighbours correlate by ``phi``."""
    shocks = rng.normal(0.0, sd * math.sqrt(1 - phi * phi), (reps, n))
    x = np.empty((reps, n))
    x[:, 0] = rng.normal(0.0, sd, reps)
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + shocks[:, t]
    return x


def coverage(block_tokens: int, reps: int, resamples: int, n: int = 2048) -> float:
    """Share of simulated evaluations whose ratio interval holds the true ratio. The reference's
    per-token NLL varies a lot (the text), the variant's excess a little, both correlated over
    a few tokens (phi 0.6), as a real text's NLL is."""
    rng = np.random.default_rng(7)
    reference = 3.0 + ar1(rng, reps, n, 0.6, 1.5)
    variant = reference + TRUE_DELTA + ar1(rng, reps, n, 0.6, 0.4)
    zeros, agree = np.zeros(n), np.ones(n, dtype=bool)
    hits = 0
    for r in range(reps):
        sums = block_sums(reference[r], variant[r], zeros, agree, block_tokens)
        figures = token_figures(sums, 0.95, resamples=resamples)
        assert figures is not None
        hits += (
            figures.perplexity_ratio.low <= math.exp(TRUE_DELTA) <= figures.perplexity_ratio.high
        )
    return hits / reps


def some_blocks(seed: int = 1, n: int = 700) -> BlockSums:
    rng = np.random.default_rng(seed)
    reference = rng.gamma(2.0, 1.5, n)
    variant = reference + rng.normal(0.05, 0.3, n)
    kl = np.abs(rng.normal(0.1, 0.05, n))
    return block_sums(reference, variant, kl, rng.random(n) < 0.8, 32)


def heldout(oks: list[bool]) -> HeldoutScore:
    answers = [
        HeldoutAnswer(question=f"q{i}?", expected="a", got="a" if ok else "b", ok=ok)
        for i, ok in enumerate(oks)
    ]
    return HeldoutScore(
        accuracy=sum(oks) / len(oks), correct=sum(oks), total=len(oks), answers=answers
    )


def test_blocks_cut_the_tokens_in_text_order() -> None:
    sums = block_sums(
        np.array([1.0, 2.0, 3.0, 4.0, 5.0]),
        np.array([1.5, 2.0, 3.0, 4.0, 6.0]),
        np.array([0.1, 0.0, 0.0, 0.2, 0.3]),
        np.array([True, False, True, True, False]),
        block_tokens=2,
    )
    assert sums.tokens.tolist() == [2, 2, 1]  # the last block holds the remainder
    assert sums.reference_nll.tolist() == [3.0, 7.0, 5.0]
    assert sums.variant_nll.tolist() == [3.5, 7.0, 6.0]
    assert sums.kl.tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert sums.agreements.tolist() == [1, 2, 0]
    stored = BlockSums.of(sums.to_blocks())  # what the report keeps reads back exactly
    for field in ("tokens", "reference_nll", "variant_nll", "kl", "agreements"):
        assert np.array_equal(getattr(stored, field), getattr(sums, field)), field


def test_the_bootstrap_is_seeded_and_reproducible() -> None:
    sums = some_blocks()
    first, again = token_figures(sums, 0.95), token_figures(sums, 0.95)
    assert first is not None and first == again  # the same seed: the same intervals
    other = token_figures(sums, 0.95, seed=1)
    assert other is not None and other.perplexity_ratio != first.perplexity_ratio
    ratio = first.perplexity_ratio
    assert ratio.n == 22 and "2000 resamples" in ratio.method and "seed 0" in ratio.method
    assert ratio.low < ratio.value < ratio.high
    # the point value is the ratio over all tokens: exp(mean NLL_var - mean NLL_ref)
    excess = (sums.variant_nll.sum() - sums.reference_nll.sum()) / sums.tokens.sum()
    assert ratio.value == pytest.approx(math.exp(excess), rel=1e-12)
    assert first.kl_mean.value == pytest.approx(sums.kl.sum() / sums.tokens.sum())


def test_the_block_interval_covers_the_true_ratio_at_its_confidence() -> None:
    """200 simulated evaluations of 2048 correlated tokens (64 blocks): about 95 % of the
    intervals hold the true ratio (seeded, so the share is a fixed number, 0.94)."""
    assert 0.90 <= coverage(block_tokens=32, reps=200, resamples=2000) <= 0.98


def test_resampling_single_tokens_would_undercover() -> None:
    """Why blocks: on the same correlated tokens, resampling them one by one takes them as
    independent and its 95 % interval holds the true ratio far less often (about 2 in 3)."""
    assert coverage(block_tokens=1, reps=60, resamples=200) < 0.85


def test_a_model_against_itself_has_a_ratio_interval_of_exactly_one() -> None:
    rng = np.random.default_rng(3)
    nll = rng.gamma(2.0, 1.5, 500)
    figures = token_figures(
        block_sums(nll, nll.copy(), np.zeros(500), np.ones(500, bool), 32), 0.95
    )
    assert figures is not None
    ratio = figures.perplexity_ratio
    assert (ratio.value, ratio.low, ratio.high) == (1.0, 1.0, 1.0)
    assert (figures.kl_mean.low, figures.kl_mean.high) == (0.0, 0.0)
    assert (figures.top1_agreement.low, figures.top1_agreement.high) == (1.0, 1.0)


def test_too_few_blocks_give_no_token_interval() -> None:
    one = block_sums(np.ones(20), np.ones(20), np.zeros(20), np.ones(20, bool), 32)
    assert token_figures(one, 0.95) is None
    intervals = quality_intervals(one, heldout([True, False]), 0.95)
    assert intervals.perplexity_ratio is None and intervals.heldout_accuracy is not None


def test_clopper_pearson_by_hand_for_12_of_13() -> None:
    """At its ends, the binomial tail beyond 12 of 13 is exactly (1 - 0.95) / 2."""
    figure = clopper_pearson(12, 13, 0.95)
    assert figure is not None and figure.value == 12 / 13 and figure.n == 13
    low, high = figure.low, figure.high
    # P(X >= 12 | p = low) = 13 p^12 (1 - p) + p^13
    assert 13 * low**12 * (1 - low) + low**13 == pytest.approx(0.025, abs=1e-12)
    # P(X <= 12 | p = high) = 1 - p^13, so high = 0.975^(1/13)
    assert high == pytest.approx(0.975 ** (1 / 13), abs=1e-12)
    assert (round(low, 4), round(high, 4)) == (0.6397, 0.9981)
    everything = clopper_pearson(13, 13, 0.95)
    assert everything is not None and everything.high == 1.0
    assert everything.low == pytest.approx(0.025 ** (1 / 13), abs=1e-12)  # P(X = 13) = p^13
    assert clopper_pearson(0, 0, 0.95) is None


def test_the_report_carries_every_interval_and_its_blocks(tmp_path: Path) -> None:
    """assemble_report on two fake passes of the same model (bf16 against the merged model):
    ratio [1, 1], KL [0, 0]; held-out accuracy by Clopper-Pearson; the stored blocks give the
    stored intervals again."""
    from quantbench.quality.evaluate import assemble_report
    from quantbench.quality.spec import EvaluateSettings
    from quantbench.quality.worker import ScoreResult
    from quantbench.quantize.variant import VariantInfo

    rng = np.random.default_rng(5)
    nll, top1 = rng.gamma(2.0, 1.5, 300), rng.integers(0, 50, 300)
    memory = {
        "before_load_rss_bytes": 1, "after_load_rss_bytes": 2,
        "after_score_peak_rss_bytes": 3, "peak_rss_bytes": 4,
    }  # fmt: skip
    timings = {"load_s": 1.0, "score_s": 1.0, "heldout_s": 1.0}
    passes = [ScoreResult(nll.copy(), top1.copy(), 50, [], memory, [], timings) for _ in "ab"]
    settings = EvaluateSettings(confidence=0.9, bootstrap_block_tokens=16)
    report = assemble_report(
        "bf16",
        VariantInfo(tmp_path, examples.variant_record("bf16", 1000, 16.0)),
        tmp_path,
        True,
        passes[0],
        passes[1],
        np.zeros(300),
        heldout([True] * 12 + [False]),
        settings,
        EvalText(path="eval.txt", tokens=301, ids_sha256=token_ids_sha256(range(301))),
        threads=1,
        total_s=1.0,
    )
    assert report.intervals is not None and len(report.blocks) == 19  # 18 x 16 + 12
    ratio = report.intervals.perplexity_ratio
    assert ratio is not None and (ratio.low, ratio.high, ratio.confidence) == (1.0, 1.0, 0.9)
    assert report.intervals.kl_mean is not None and report.intervals.kl_mean.high == 0.0
    accuracy = report.intervals.heldout_accuracy
    assert accuracy == clopper_pearson(12, 13, 0.9)
    again = quality_intervals(BlockSums.of(report.blocks), report.heldout, 0.9)
    assert again == report.intervals
    assert report.intervals.perplexity is not None
    assert report.intervals.perplexity.value == pytest.approx(report.perplexity, rel=1e-12)
