"""Per-token statistics of next-token distributions: NLL, KL divergence, top-1 agreement.

The definitions follow llama.cpp's `llama-perplexity --kl-divergence`: KL(P_ref || P_variant)
per scored token, summarized by its mean, median, a high percentile and max; perplexity is
exp(mean NLL); top-1 agreement is the share of tokens whose most likely next token is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROWS_PER_CHUNK = 256


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax, accumulated in float64, returned as float32."""
    x = logits.astype(np.float64, copy=False)
    shifted = x - x.max(axis=-1, keepdims=True)
    out = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out.astype(np.float32)


@dataclass
class TokenStats:
    """One number per scored token, for one model."""

    nll: np.ndarray  # -log p(actual next token)
    top1: np.ndarray  # argmax of the predicted distribution

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.nll.mean()))


def token_stats(logprobs: np.ndarray, targets: np.ndarray) -> TokenStats:
    """NLL of the targets and the argmax, from log-probabilities (rows aligned with targets)."""
    nll = -logprobs[np.arange(len(targets)), targets].astype(np.float64)
    return TokenStats(nll=nll, top1=logprobs.argmax(axis=-1))


def kl_per_token(ref_path: Path, var_path: Path, rows: int, vocab: int) -> np.ndarray:
    """KL(P_ref || P_var) for each row of two float32 log-prob files (rows x vocab), chunked."""
    ref = np.memmap(ref_path, dtype=np.float32, mode="r", shape=(rows, vocab))
    var = np.memmap(var_path, dtype=np.float32, mode="r", shape=(rows, vocab))
    out = np.empty(rows, dtype=np.float64)
    for lo in range(0, rows, ROWS_PER_CHUNK):
        hi = min(rows, lo + ROWS_PER_CHUNK)
        r = np.asarray(ref[lo:hi], dtype=np.float64)
        v = np.asarray(var[lo:hi], dtype=np.float64)
        out[lo:hi] = (np.exp(r) * (r - v)).sum(axis=-1)
    # Rounding can make an exact-zero divergence come out a hair below zero.
    return np.maximum(out, 0.0)


def summarize_kl(kl: np.ndarray, percentile: float) -> dict[str, float]:
    return {
        "mean": float(kl.mean()),
        "median": float(np.median(kl)),
        f"p{percentile:g}": float(np.percentile(kl, percentile)),
        "max": float(kl.max()),
    }


def compare(
    ref: TokenStats, var: TokenStats, kl: np.ndarray, percentile: float
) -> dict[str, object]:
    """The variant-vs-reference numbers of one evaluation."""
    ppl_ref, ppl_var = ref.perplexity, var.perplexity
    return {
        "tokens": len(kl),
        "perplexity": ppl_var,
        "reference_perplexity": ppl_ref,
        "perplexity_ratio": ppl_var / ppl_ref,
        "kl_divergence": summarize_kl(kl, percentile),
        "top1_agreement": float((ref.top1 == var.top1).mean()),
    }
