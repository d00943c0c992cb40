"""Evaluation windows: every token scored at most once, with the promised context."""

from __future__ import annotations

import pytest

from quantbench.quality.windows import plan_windows


def scored_targets(n: int, ctx: int, stride: int) -> list[int]:
    targets: list[int] = []
    for w in plan_windows(n, ctx, stride):
        assert w.end - w.start <= ctx
        rows = range(w.logit_rows.start, w.logit_rows.stop)
        # row r of a window's logits predicts token start + r + 1
        assert [w.start + r + 1 for r in rows] == list(range(w.first_target, w.end))
        targets.extend(range(w.first_target, w.end))
    return targets


@pytest.mark.parametrize("n", [2, 5, 512, 513, 1000, 2224])
def test_overlapping_windows_score_every_token_once(n: int) -> None:
    assert scored_targets(n, 512, 256) == list(range(1, n))


def test_overlapping_windows_keep_the_promised_context() -> None:
    for w in plan_windows(2224, 512, 256)[1:]:
        assert w.first_target - w.start >= 512 - 256


def test_disjoint_windows_skip_each_first_token() -> None:
    # like llama.cpp's chunks: the first token of a chunk has nothing to be predicted from
    assert scored_targets(10, 4, 4) == [1, 2, 3, 5, 6, 7, 9]


def test_bad_plans_are_errors() -> None:
    with pytest.raises(ValueError):
        plan_windows(1, 512, 256)
    with pytest.raises(ValueError):
        plan_windows(100, 64, 65)
