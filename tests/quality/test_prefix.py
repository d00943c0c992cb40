"""The prompts' common prefix leaves every prompt a token of its own."""

from __future__ import annotations

from quantbench.quality.prefix import common_prefix


def test_the_common_prefix_leaves_each_prompt_a_token_of_its_own() -> None:
    assert common_prefix([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert common_prefix([[1, 2, 3], [1, 2, 3]]) == 2  # identical: the last is each row's own
    assert common_prefix([[7], [7, 8]]) == 0
    assert common_prefix([[1, 2], [3, 4]]) == 0


def test_one_prompt_shares_nothing() -> None:
    assert common_prefix([[1, 2, 3]]) == 0
    assert common_prefix([]) == 0
