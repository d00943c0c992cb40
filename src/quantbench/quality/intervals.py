"""Confidence intervals for one variant's quality figures, from the evaluation's own data.

The figures come from one ~46 kB text (about 9,800 scored tokens) and the held-out questions (253
shipped: 13 facts and 240 ticket codes, data/README.md), and
the deployment decision uses them to settle ties and to say what a variant gives up: a number
without its interval cannot say whether 1.006 differs from 1.000.

* **Token figures** (perplexity, its ratio to the merged model, KL mean, top-1 agreement): a
  paired block bootstrap. The NLL and KL of neighbouring tokens are correlated (a rare name
  split into pieces is hard for several tokens in a row, a memorised phrase easy), so resampling
  single tokens would treat them as independent and understate the uncertainty. The scored
  tokens are cut, in text order, into blocks of ``bootstrap_block_tokens``; a resample draws
  whole blocks with replacement, keeping the correlation inside each block. It is paired: each
  resample takes the same blocks for the variant and the merged model (they scored the same
  ids), so how hard the text happens to be cancels in the ratio, and only the models'
  difference varies. Every figure is a ratio of sums over the resample's tokens (the perplexity
  ratio is exp(mean NLL_variant - mean NLL_merged) over them), so a shorter last block weighs by
  its tokens. The interval is the percentile interval of the resampled figures, seeded, so a
  rerun gives the same interval.
* **Held-out accuracy**: the exact binomial (Clopper-Pearson) interval: near 100 % (a
  fine-tune that learnt its task) a normal approximation is meaningless, and the exact interval
  never claims more than the count allows (253/253 still gives [0.986, 1]).

The blocks' sums are stored in the report (``QualityReport.blocks``): they are all a later stage
needs to compare two variants paired (:mod:`quantbench.quality.compare`), and the intervals here
are computed from them alone, so a reader can recompute them. No I/O here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quantbench.precision import BOOTSTRAP_RESAMPLES, Figure
from quantbench.schemas.common import HeldoutScore
from quantbench.schemas.quality import QualityIntervals, TokenBlock

SEED = 0
"""The bootstrap's seed: fixed, so an evaluation run twice reports the same intervals."""
RESAMPLES = BOOTSTRAP_RESAMPLES
MIN_BLOCKS = 2
"""Fewer blocks than this give no token interval (every resample would be the same)."""
# Draws held in memory at a time: (resamples x blocks x columns) floats stay a few MB however
# long the evaluation text is.
_GATHER_FLOATS = 2_000_000


def token_ids_sha256(ids: Sequence[int]) -> str:
    """The hash that says two evaluations scored the same token ids (decimal, comma-separated:
    the same digest from any language)."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode("ascii")).hexdigest()


@dataclass(frozen=True)
class BlockSums:
    """Per-block sums as arrays (one entry per block, in text order)."""

    tokens: np.ndarray
    reference_nll: np.ndarray
    variant_nll: np.ndarray
    kl: np.ndarray
    agreements: np.ndarray

    @property
    def blocks(self) -> int:
        return int(self.tokens.size)

    @classmethod
    def of(cls, blocks: Sequence[TokenBlock]) -> BlockSums:
        """The arrays of a report's stored blocks."""
        return cls(
            tokens=np.array([b.tokens for b in blocks], dtype=np.float64),
            reference_nll=np.array([b.reference_nll for b in blocks], dtype=np.float64),
            variant_nll=np.array([b.variant_nll for b in blocks], dtype=np.float64),
            kl=np.array([b.kl for b in blocks], dtype=np.float64),
            agreements=np.array([b.top1_agreements for b in blocks], dtype=np.float64),
        )

    def to_blocks(self) -> list[TokenBlock]:
        return [
            TokenBlock(
                tokens=int(t),
                reference_nll=float(r),
                variant_nll=float(v),
                kl=float(k),
                top1_agreements=int(a),
            )
            for t, r, v, k, a in zip(
                self.tokens,
                self.reference_nll,
                self.variant_nll,
                self.kl,
                self.agreements,
                strict=True,
            )
        ]


def block_sums(
    reference_nll: np.ndarray,
    variant_nll: np.ndarray,
    kl: np.ndarray,
    agree: np.ndarray,
    block_tokens: int,
) -> BlockSums:
    """Cut per-token values (scored tokens in text order) into consecutive blocks of
    ``block_tokens`` (the last one holds the remainder) and sum each."""
    n = len(reference_nll)
    if not n == len(variant_nll) == len(kl) == len(agree):
        raise ValueError(
            f"per-token arrays differ in length: reference {n}, variant {len(variant_nll)}, "
            f"kl {len(kl)}, agreement {len(agree)}"
        )
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    starts = np.arange(0, n, block_tokens)

    def sums(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(np.asarray(values, dtype=np.float64), starts) if n else starts * 0.0

    return BlockSums(
        tokens=np.diff(np.append(starts, n)).astype(np.float64),
        reference_nll=sums(reference_nll),
        variant_nll=sums(variant_nll),
        kl=sums(kl),
        agreements=sums(np.asarray(agree, dtype=bool)),
    )


def resampled_sums(columns: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Column sums over ``resamples`` bootstrap resamples of the rows (blocks), drawn with
    replacement: (resamples, columns). Rows stay whole, so the columns of one block (the
    variant's and the reference's sums) are always drawn together: that is the pairing."""
    rows, width = columns.shape
    rng = np.random.default_rng(seed)
    out = np.empty((resamples, width), dtype=np.float64)
    chunk = max(1, min(resamples, _GATHER_FLOATS // max(1, rows * width)))
    for lo in range(0, resamples, chunk):
        hi = min(resamples, lo + chunk)
        picks = rng.integers(0, rows, size=(hi - lo, rows))
        out[lo:hi] = columns[picks].sum(axis=1)
    return out


def percentile_interval(
    samples: np.ndarray, confidence: float, value: float, n: int, method: str, exp: bool = False
) -> Figure:
    """The percentile interval of bootstrap ``samples`` as a Figure; with ``exp`` the samples
    are logarithms and the interval is taken on that scale, then exponentiated."""
    alpha = (1 - confidence) / 2
    low, high = (float(q) for q in np.quantile(samples, [alpha, 1 - alpha]))
    if exp:
        low, high = float(np.exp(low)), float(np.exp(high))
    return Figure(value=value, low=low, high=high, confidence=confidence, n=n, method=method)


def bootstrap_method(blocks: BlockSums, resamples: int, seed: int) -> str:
    widest = int(blocks.tokens.max()) if blocks.blocks else 0
    return (
        f"paired block bootstrap ({blocks.blocks} blocks of up to {widest} tokens, "
        f"{resamples} resamples, seed {seed}, percentile)"
    )


@dataclass(frozen=True)
class TokenFigures:
    """The token figures with their intervals (see the module docstring)."""

    perplexity: Figure
    reference_perplexity: Figure
    perplexity_ratio: Figure
    kl_mean: Figure
    top1_agreement: Figure


def token_figures(
    blocks: BlockSums, confidence: float, seed: int = SEED, resamples: int = RESAMPLES
) -> TokenFigures | None:
    """Perplexities, the perplexity ratio, KL mean and top-1 agreement with their paired block
    bootstrap intervals; None with fewer than :data:`MIN_BLOCKS` blocks."""
    if blocks.blocks < MIN_BLOCKS:
        return None
    # The NLL difference is taken per block before resampling: a variant identical to the
    # reference then resamples exact zeros, and its ratio interval is exactly [1, 1].
    columns = np.column_stack(
        [
            blocks.tokens,
            blocks.variant_nll,
            blocks.reference_nll,
            blocks.variant_nll - blocks.reference_nll,
            blocks.kl,
            blocks.agreements,
        ]
    )
    total = columns.sum(axis=0)
    drawn = resampled_sums(columns, resamples, seed)
    per_token = drawn[:, 1:] / drawn[:, :1]  # every figure is a sum over the resample's tokens
    point = total[1:] / total[0]
    method = bootstrap_method(blocks, resamples, seed)

    def figure(col: int, exp: bool = False) -> Figure:
        value = float(np.exp(point[col])) if exp else float(point[col])
        return percentile_interval(
            per_token[:, col], confidence, value, blocks.blocks, method, exp=exp
        )

    return TokenFigures(
        perplexity=figure(0, exp=True),
        reference_perplexity=figure(1, exp=True),
        perplexity_ratio=figure(2, exp=True),
        kl_mean=figure(3),
        top1_agreement=figure(4),
    )


def clopper_pearson(k: int, n: int, confidence: float) -> Figure | None:
    """k of n with its exact binomial (Clopper-Pearson) interval; None for n = 0.

    The ends are the success probabilities at which observing k or more (for the low end), or
    k or fewer (for the high end), has probability (1 - confidence) / 2.
    """
    from scipy.stats import beta

    if n == 0:
        return None
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    alpha = 1 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return Figure(
        value=k / n, low=low, high=high, confidence=confidence, n=n, method="Clopper-Pearson"
    )


def quality_intervals(
    blocks: BlockSums,
    heldout: HeldoutScore,
    confidence: float,
    seed: int = SEED,
    resamples: int = RESAMPLES,
) -> QualityIntervals:
    """Every figure of a quality report with its interval."""
    tokens = token_figures(blocks, confidence, seed, resamples)
    return QualityIntervals(
        perplexity=tokens.perplexity if tokens else None,
        reference_perplexity=tokens.reference_perplexity if tokens else None,
        perplexity_ratio=tokens.perplexity_ratio if tokens else None,
        kl_mean=tokens.kl_mean if tokens else None,
        top1_agreement=tokens.top1_agreement if tokens else None,
        heldout_accuracy=clopper_pearson(heldout.correct, heldout.total, confidence),
    )


__all__ = [
    "MIN_BLOCKS",
    "RESAMPLES",
    "SEED",
    "BlockSums",
    "TokenFigures",
    "block_sums",
    "clopper_pearson",
    "percentile_interval",
    "quality_intervals",
    "resampled_sums",
    "token_figures",
    "token_ids_sha256",
]
