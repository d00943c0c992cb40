"""KL divergence, perplexity and top-1 agreement against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quantbench.quality.metrics import (
    ReferenceRows,
    TokenStats,
    compare,
    kl_rows,
    log_softmax,
    summarize_kl,
    token_stats,
)


def write(path, rows: np.ndarray) -> None:
    path.write_bytes(np.ascontiguousarray(rows, dtype=np.float32).tobytes())


def test_log_softmax_normalizes_and_survives_large_logits() -> None:
    logits = np.array([[1000.0, 1000.0, 0.0], [1.0, 2.0, 3.0]], dtype=np.float32)
    out = log_softmax(logits)
    assert np.allclose(np.exp(out).sum(axis=1), 1.0, atol=1e-6)
    assert out[0, 0] == pytest.approx(math.log(0.5), abs=1e-6)


def test_kl_matches_the_definition() -> None:
    p = np.array([[0.5, 0.25, 0.25], [0.9, 0.05, 0.05]])
    q = np.array([[0.25, 0.5, 0.25], [0.9, 0.05, 0.05]])
    kl = kl_rows(np.log(p).astype(np.float32), np.log(q).astype(np.float32))
    expected = 0.5 * math.log(2) + 0.25 * math.log(0.5)
    assert kl[0] == pytest.approx(expected, rel=1e-5)
    assert kl[1] == pytest.approx(0.0, abs=1e-7)


def test_kl_of_identical_rows_is_exactly_zero() -> None:
    rows = log_softmax(np.random.default_rng(0).normal(size=(600, 50)).astype(np.float32))
    assert not kl_rows(rows, rows.copy()).any()


def test_reference_rows_come_back_in_order_and_a_short_file_is_refused(tmp_path) -> None:
    rows = log_softmax(np.random.default_rng(1).normal(size=(70, 50)).astype(np.float32))
    write(tmp_path / "ref", rows)
    reader = ReferenceRows(tmp_path / "ref", 50)
    got = []
    for count in (32, 32, 6):  # the worker's blocks; the buffer is reused, so copy
        got.append(reader.take(count).copy())
    assert np.array_equal(np.concatenate(got), rows) and reader.left == 0
    with pytest.raises(ValueError, match="70 rows of the reference"):
        reader.take(1)
    reader.close()


def test_perplexity_top1_and_summary() -> None:
    logprobs = np.log(np.array([[0.5, 0.5, 0.0 + 1e-12], [0.1, 0.2, 0.7]]))
    stats = token_stats(logprobs, np.array([0, 2]))
    assert stats.perplexity == pytest.approx(math.exp((math.log(2) - math.log(0.7)) / 2))
    assert list(stats.top1) == [0, 2]
    other = TokenStats(nll=stats.nll * 2, top1=np.array([1, 2]))
    report = compare(stats, other, np.array([0.0, 0.2]), 99.0)
    assert report["top1_agreement"] == 0.5
    assert report["perplexity_ratio"] == pytest.approx(stats.perplexity)  # exp(2x)/exp(x)
    summary = summarize_kl(np.linspace(0, 1, 101), 99.0)
    assert summary["p99"] == pytest.approx(0.99) and summary["max"] == 1.0
