"""The tokens a batch of prompts begins with: run once, their KV cache shared by every row.

Every held-out question is one user turn in the merged model's chat template, so every prompt
opens with the same system turn: 24 of the prompts' 51 tokens on average on the embedded model.
Both answer batchers (transformers' and llama.cpp's) compute that prefix once per batch instead
of once per row: the batch's prefill was most of an evaluate stage's answering.
"""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt begins with, leaving each at least one of its own (a row's first
    logits come from its own last token); 0 for fewer than two prompts (nothing to share)."""
    if len(prompts) < 2:
        return 0
    shortest = min(len(p) for p in prompts)
    n = 0
    while n < shortest - 1 and all(p[n] == prompts[0][n] for p in prompts):
        n += 1
    return n
