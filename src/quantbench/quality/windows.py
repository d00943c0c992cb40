"""Sliding windows over the evaluation token ids: which tokens each forward pass scores.

Every backend gets exactly these ids (from the reference model's tokenizer): llama.cpp's
tokenizer splits whitespace differently from the transformers one, and perplexities over
different token sequences are not comparable. Each token is scored at most once, by the first
window that holds it with context before it: with stride < context_length that context is at
least `context_length - stride` tokens (after the first window); with stride = context_length the
windows are disjoint, like llama.cpp's perplexity chunks, and each window's first token is not
scored.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """Tokens [start, end) go in; targets [first_target, end) are scored."""

    start: int
    end: int
    first_target: int

    @property
    def logit_rows(self) -> slice:
        """Rows of this window's logits that predict its scored targets."""
        return slice(self.first_target - self.start - 1, self.end - self.start - 1)


def plan_windows(n_tokens: int, context_length: int, stride: int) -> list[Window]:
    """Windows of `context_length` tokens advancing by `stride`, scoring each token once."""
    if n_tokens < 2:
        raise ValueError("the evaluation text must have at least 2 tokens")
    if not 1 <= stride <= context_length:
        raise ValueError(f"need 1 <= stride ({stride}) <= context_length ({context_length})")
    windows: list[Window] = []
    scored_until = 1  # token 0 has no prediction
    start = 0
    while scored_until < n_tokens:
        end = min(start + context_length, n_tokens)
        if end > scored_until:
            windows.append(Window(start, end, max(scored_until, start + 1)))
            scored_until = end
        start += stride
    return windows
