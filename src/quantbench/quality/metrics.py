"""Per-token statistics of next-token distributions: NLL, KL divergence, top-1 agreement.

The definitions follow llama.cpp's `llama-perplexity --kl-divergence`: KL(P_ref || P_variant)
per scored token, summarized by its mean, median, a high percentile and max; perplexity is
exp(mean NLL); top-1 agreement is the share of tokens whose most likely next token is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


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


def kl_rows(ref: np.ndarray, var: np.ndarray) -> np.ndarray:
    """KL(P_ref || P_var) of each row of two float32 log-probability blocks, in float64."""
    r = np.asarray(ref, dtype=np.float64)
    v = np.asarray(var, dtype=np.float64)
    # Rounding can make an exact-zero divergence come out a hair below zero.
    return np.maximum((np.exp(r) * (r - v)).sum(axis=-1), 0.0)


class ReferenceRows:
    """A reference pass's log-probability file (rows x vocab float32), read block by block in
    order while the variant's pass computes its own rows, so the variant's rows are never
    written anywhere (each was 1.9 GB on the default run's text).

    Plain reads into one reused buffer, not a memory map: a map's touched pages count in the
    reading process's resident set, and the variant's peak memory is a reported figure.
    """

    def __init__(self, path: Path, vocab: int) -> None:
        self.path, self.vocab = Path(path), vocab
        self.rows = self.path.stat().st_size // (4 * vocab)
        self._file = open(self.path, "rb")  # noqa: SIM115 - closed by close(), after the pass
        self._read = 0
        self._buf = np.empty((0, vocab), dtype=np.float32)

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` rows (a view of a buffer the next call overwrites)."""
        if self._read + count > self.rows:
            raise ValueError(
                f"{self.path}: {self.rows} rows of the reference, asked for row "
                f"{self._read + count} (the two passes scored different windows)"
            )
        if len(self._buf) < count:
            self._buf = np.empty((count, self.vocab), dtype=np.float32)
        rows = self._buf[:count]
        self._file.readinto(memoryview(rows).cast("B"))
        self._read += count
        return rows

    @property
    def left(self) -> int:
        """Rows not read yet."""
        return self.rows - self._read

    def close(self) -> None:
        self._file.close()


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
