"""Two variants compared paired: does one really lose more than the other?

Two quality reports each carry an interval, but two overlapping intervals do not show that two
variants are alike: both were measured on the same tokens and the same questions, and what
makes the text hard or a question easy is shared. Comparing them paired (the difference on each
block of tokens, each question) removes that shared part, so a real difference shows with far
less data than the reports' own intervals suggest.

* **Perplexity ratio and KL mean, top-1 agreement**: the paired block bootstrap of
  :mod:`quantbench.quality.intervals`, over both reports' stored blocks at once (a resample
  takes the same blocks for both variants and the reference). The perplexity comparison is the
  ratio of the two perplexity ratios, exp(mean (NLL_a - NLL_ref) - mean (NLL_b - NLL_ref)):
  perplexity compares by ratio, and on one reference it is perplexity_a / perplexity_b. KL mean
  and top-1 agreement compare by difference (a - b).
* **Held-out accuracy**: the exact McNemar test: only the discordant questions (right for one,
  wrong for the other) carry information, and under "no difference" each goes either way with
  probability 1/2, so the p-value is the two-sided exact binomial on them (twice the smaller
  tail). The interval for the accuracy difference is Newcombe's square-and-add interval for
  paired proportions (Newcombe 1998, method 10, computed as in Fagerland, Lydersen & Laake,
  "Statistical Analysis of Contingency Tables", ch. 8, whose worked example the tests
  reproduce): the exact conditional interval from the binomial on the discordant pairs holds
  their number fixed, so when the two variants answer every question alike (five of the six
  default variants answered 13/13) it collapses to [0, 0], a certainty 13 questions cannot
  give; Newcombe's interval also carries the uncertainty of each accuracy (Wilson intervals)
  and is among the intervals Fagerland, Lydersen & Laake (Stat Med 2014) recommend for small
  paired samples. Being a different construction,
  it can, near the edge, exclude 0 while the exact test does not reject (or the reverse): read
  the p-value for "do they differ", the interval for "by how much".

Reports that were not measured on the same things are refused (:class:`NotPairedError`): a
paired comparison of unrelated tokens or questions would be a number without meaning. No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field

from quantbench.precision import Figure
from quantbench.quality.intervals import (
    MIN_BLOCKS,
    RESAMPLES,
    SEED,
    BlockSums,
    bootstrap_method,
    percentile_interval,
    resampled_sums,
)
from quantbench.quality.spec import EvaluateSettings
from quantbench.schemas.base import Strict
from quantbench.schemas.quality import QualityReport

# Settings that do not change what was measured, only how it is summarized.
SUMMARY_SETTINGS = frozenset({"confidence", "kl_percentile"})
# Settings that shape a held-out answer (the questions themselves are compared one by one).
ANSWER_SETTINGS = ("heldout_max_new_tokens", "compute_dtype")
# How far two evaluations' reference NLL may differ per block and still be the same reference
# on the same ids: thread counts reorder float32 sums (about 1e-6 relative); another merge or
# another compute dtype moves a 32-token block by whole nats.
REFERENCE_RTOL = 1e-4


class NotPairedError(ValueError):
    """Two quality reports whose tokens or questions do not correspond."""


class HeldoutComparison(Strict):
    """Held-out answers of two variants, question by question."""

    difference: Figure = Field(
        description="accuracy_a - accuracy_b with Newcombe's paired interval (n = questions)."
    )
    a_only: int = Field(description="Questions a answered right and b wrong.")
    b_only: int = Field(description="Questions b answered right and a wrong.")
    both: int
    neither: int
    p_value: float = Field(description="Exact McNemar test (two-sided) on a_only vs b_only.")


class VariantComparison(Strict):
    """Variant a against variant b on the same reference, ids and questions."""

    a: str
    b: str
    perplexity_ratio: Figure | None = Field(
        description="a's perplexity ratio / b's (1: no difference); None with too few blocks."
    )
    kl_mean_difference: Figure | None = Field(description="KL mean of a - KL mean of b.")
    top1_agreement_difference: Figure | None = Field(description="a's top-1 agreement - b's.")
    heldout: HeldoutComparison | None = Field(description="None without held-out questions.")


def check_paired(a: QualityReport, b: QualityReport) -> None:
    """Refuse (:class:`NotPairedError`) two reports whose blocks or questions do not
    correspond: same reference, token ids, settings and blocks; same questions."""
    check_same_tokens(a, b)
    check_same_questions(a, b)


def check_same_tokens(a: QualityReport, b: QualityReport) -> None:
    """Refuse two reports whose token blocks do not correspond block by block."""
    names = f"{a.name!r} and {b.name!r}"
    for report in (a, b):
        if not report.blocks:
            raise NotPairedError(
                f"report {report.name!r} has no token blocks (written before schema version 3): "
                f"rerun `dvc repro evaluate@{report.name}` to compare it"
            )
    _same(names, "reference model", a.reference.path, b.reference.path)
    _same(names, "scored tokens", a.tokens, b.tokens)
    _same(names, "token ids (eval_text.ids_sha256)", a.eval_text.ids_sha256, b.eval_text.ids_sha256)
    _same(names, "evaluate settings", _measurement(a.settings), _measurement(b.settings))
    _same(names, "block sizes", [x.tokens for x in a.blocks], [x.tokens for x in b.blocks])
    ref_a = np.array([x.reference_nll for x in a.blocks])
    ref_b = np.array([x.reference_nll for x in b.blocks])
    if not np.allclose(ref_a, ref_b, rtol=REFERENCE_RTOL, atol=0.0):
        worst = int(np.argmax(np.abs(ref_a - ref_b)))
        raise NotPairedError(
            f"{names} differ in the reference's NLL (block {worst}: {ref_a[worst]:.6g} vs "
            f"{ref_b[worst]:.6g} nats): not the same reference model on the same ids"
        )


def check_same_questions(a: QualityReport, b: QualityReport) -> None:
    """Refuse two reports not asked the same held-out questions, in the same order, the same
    way (the answers need no token blocks: a version-2 report compares here too)."""
    names = f"{a.name!r} and {b.name!r}"
    questions_a = [(x.question, x.expected) for x in a.heldout.answers]
    questions_b = [(x.question, x.expected) for x in b.heldout.answers]
    if questions_a != questions_b:
        raise NotPairedError(
            f"{names} were asked different held-out questions ({len(questions_a)} vs "
            f"{len(questions_b)}, or another list or order)"
        )
    for key in ANSWER_SETTINGS:
        _same(names, f"evaluate.{key}", a.settings.get(key), b.settings.get(key))


def _same(names: str, what: str, x: Any, y: Any) -> None:
    if x != y:
        raise NotPairedError(f"{names} differ in {what}: {x!r} vs {y!r}")


def _measurement(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in SUMMARY_SETTINGS}


def compare_reports(
    a: QualityReport,
    b: QualityReport,
    confidence: float | None = None,
    seed: int = SEED,
    resamples: int = RESAMPLES,
) -> VariantComparison:
    """Variant ``a`` against variant ``b``, paired: every figure. ``confidence`` defaults to the
    reports' ``evaluate.confidence`` (which must then agree)."""
    check_paired(a, b)
    level = _confidence(a, b) if confidence is None else confidence
    tokens = token_differences(
        BlockSums.of(a.blocks), BlockSums.of(b.blocks), level, seed, resamples
    )
    return VariantComparison(
        a=a.name,
        b=b.name,
        perplexity_ratio=tokens[0] if tokens else None,
        kl_mean_difference=tokens[1] if tokens else None,
        top1_agreement_difference=tokens[2] if tokens else None,
        heldout=compare_heldout(a, b, level) if a.heldout.answers else None,
    )


def compare_perplexity(
    a: QualityReport,
    b: QualityReport,
    confidence: float | None = None,
    seed: int = SEED,
    resamples: int = RESAMPLES,
) -> Figure:
    """a's perplexity ratio over b's (on one reference: perplexity_a / perplexity_b), with its
    paired block bootstrap interval. Raises :class:`NotPairedError` (a ValueError) for reports
    that do not correspond, ValueError with fewer than two blocks."""
    result = compare_reports(a, b, confidence, seed, resamples).perplexity_ratio
    if result is None:
        raise ValueError(f"{a.name!r} and {b.name!r} have fewer than {MIN_BLOCKS} token blocks")
    return result


def compare_heldout(
    a: QualityReport, b: QualityReport, confidence: float | None = None
) -> HeldoutComparison:
    """Held-out accuracy of a against b, question by question (exact McNemar, Newcombe's
    interval for accuracy_a - accuracy_b). Raises :class:`NotPairedError` (a ValueError) for
    reports that do not correspond, ValueError without questions."""
    check_same_questions(a, b)
    level = _confidence(a, b) if confidence is None else confidence
    return mcnemar([x.ok for x in a.heldout.answers], [x.ok for x in b.heldout.answers], level)


def _confidence(a: QualityReport, b: QualityReport) -> float:
    # a report older than the confidence setting was summarized at none: take the default
    default = EvaluateSettings.model_fields["confidence"].default
    levels = {float(r.settings.get("confidence", default)) for r in (a, b)}
    if len(levels) != 1:
        raise ValueError(
            f"reports {a.name!r} and {b.name!r} were evaluated at confidence "
            f"{' and '.join(map(str, sorted(levels)))}: pass one confidence to compare them at"
        )
    return levels.pop()


def token_differences(
    a: BlockSums, b: BlockSums, confidence: float, seed: int = SEED, resamples: int = RESAMPLES
) -> tuple[Figure, Figure, Figure] | None:
    """(ratio of perplexity ratios, KL mean difference, top-1 agreement difference) of two
    variants' blocks on the same reference and tokens; None with fewer than two blocks."""
    if not np.array_equal(a.tokens, b.tokens):
        raise NotPairedError("the two variants' blocks hold different token counts")
    if a.blocks < MIN_BLOCKS:
        return None
    # Per-block differences first: two identical variants resample exact zeros.
    columns = np.column_stack(
        [
            a.tokens,
            (a.variant_nll - a.reference_nll) - (b.variant_nll - b.reference_nll),
            a.kl - b.kl,
            a.agreements - b.agreements,
        ]
    )
    total = columns.sum(axis=0)
    drawn = resampled_sums(columns, resamples, seed)
    per_token = drawn[:, 1:] / drawn[:, :1]
    point = total[1:] / total[0]
    method = bootstrap_method(a, resamples, seed)
    n = a.blocks
    return (
        percentile_interval(
            per_token[:, 0], confidence, float(np.exp(point[0])), n, method, exp=True
        ),
        percentile_interval(per_token[:, 1], confidence, float(point[1]), n, method),
        percentile_interval(per_token[:, 2], confidence, float(point[2]), n, method),
    )


def mcnemar(a_ok: Sequence[bool], b_ok: Sequence[bool], confidence: float) -> HeldoutComparison:
    """Exact McNemar test and Newcombe's interval for accuracy_a - accuracy_b, from each
    question's verdict for a and for b (same questions, same order)."""
    if len(a_ok) != len(b_ok):
        raise NotPairedError(f"{len(a_ok)} answers against {len(b_ok)}: not the same questions")
    if not a_ok:
        raise ValueError("no held-out answers to compare")
    pairs = list(zip(a_ok, b_ok, strict=True))
    both = sum(1 for x, y in pairs if x and y)
    a_only = sum(1 for x, y in pairs if x and not y)
    b_only = sum(1 for x, y in pairs if y and not x)
    neither = len(pairs) - both - a_only - b_only
    low, high = newcombe_paired(both, a_only, b_only, neither, confidence)
    return HeldoutComparison(
        difference=Figure(
            value=(a_only - b_only) / len(pairs),
            low=low,
            high=high,
            confidence=confidence,
            n=len(pairs),
            method="Newcombe paired square-and-add (Wilson)",
        ),
        a_only=a_only,
        b_only=b_only,
        both=both,
        neither=neither,
        p_value=mcnemar_exact_p(a_only, b_only),
    )


def mcnemar_exact_p(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: the discordant pairs as Binomial(a_only + b_only, 1/2),
    twice the smaller tail (1 with no discordant pair)."""
    from scipy.stats import binom

    discordant = a_only + b_only
    if discordant == 0:
        return 1.0
    return min(1.0, 2.0 * float(binom.cdf(min(a_only, b_only), discordant, 0.5)))


def wilson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson score interval of k of n (no continuity correction)."""
    from scipy.stats import norm

    z = float(norm.ppf(1 - (1 - confidence) / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def newcombe_paired(
    both: int, a_only: int, b_only: int, neither: int, confidence: float
) -> tuple[float, float]:
    """Newcombe's square-and-add interval for p_a - p_b from a paired 2x2 table (Newcombe 1998,
    method 10): Wilson intervals of each proportion, combined with the estimated correlation
    phi between them (continuity-corrected: only an association beyond n/2 counts)."""
    n = both + a_only + b_only + neither
    p_a, p_b = (both + a_only) / n, (both + b_only) / n
    l_a, u_a = wilson(both + a_only, n, confidence)
    l_b, u_b = wilson(both + b_only, n, confidence)
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    phi = 0.0
    if margins > 0:
        cross = both * neither - a_only * b_only
        if cross > n / 2:
            phi = (cross - n / 2) / math.sqrt(margins)
        elif cross < 0:
            phi = cross / math.sqrt(margins)
    d = p_a - p_b
    down = (p_a - l_a) ** 2 + (u_b - p_b) ** 2 - 2 * phi * (p_a - l_a) * (u_b - p_b)
    up = (p_b - l_b) ** 2 + (u_a - p_a) ** 2 - 2 * phi * (p_b - l_b) * (u_a - p_a)
    return max(-1.0, d - math.sqrt(max(0.0, down))), min(1.0, d + math.sqrt(max(0.0, up)))


__all__ = [
    "HeldoutComparison",
    "NotPairedError",
    "VariantComparison",
    "check_paired",
    "check_same_questions",
    "check_same_tokens",
    "compare_heldout",
    "compare_perplexity",
    "compare_reports",
    "mcnemar",
    "mcnemar_exact_p",
    "newcombe_paired",
    "token_differences",
    "wilson",
]
