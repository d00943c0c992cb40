"""Served is what was evaluated: greedy reference answers with their margins, and the check.

A greedy answer is only as stable as its margins. Where the reference model's two best next
tokens are nearly tied (SmolLM2's base model: "The" 25.875 against "L" 25.625 for the capital of
France), another kernel, another dtype or another CPU can flip the choice and the answer drifts
somewhere else entirely, with nothing wrong in the engine. Where the best token wins by a clear
margin, an engine that picks another is serving something else: a numerically wrong kernel, a
wrong chat template, a tokenizer mismatch.

So a reference answer keeps, for each greedy token, the margin by which it won (top-1 minus
top-2 logit), and a served answer is checked only up to the first token whose margin is below
``min_margin``: that prefix must match exactly; what follows may differ. A prompt whose very first
token is a near-tie proves nothing and is reported as such ("undecided"), never as a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

# Logit margin a greedy token must win by to count as certain. bf16 moved this model's logits by
# up to ~1.6 against float32 on single entries; a flip needs the top two to move in opposite
# directions by half the margin each, which 1.5 keeps clear of for the top tokens measured here.
DEFAULT_MIN_MARGIN = 1.5
# Prompts whose answers the served check compares (besides the fine-tune's held-out questions).
# Chosen from sixteen candidates for margins on SmolLM2-135M-Instruct (base, float32): the first
# three answers are certain for 10, 8 and 6 tokens at DEFAULT_MIN_MARGIN; the capital of France is
# kept as the known near-tie (first token 0.1), which must come out "undecided", never "mismatch".
GENERAL_PROMPTS: tuple[str, ...] = (
    "What is the chemical symbol for water?",
    "What is the largest planet in the solar system?",
    "What colour is the sky on a clear day?",
    "What is the capital of France?",
)

Verdict = Literal["match", "mismatch", "undecided"]


def top_margin(logits: np.ndarray) -> tuple[int, float]:
    """(argmax, top-1 minus top-2 logit) of one row of next-token logits."""
    row = np.asarray(logits, dtype=np.float64)
    best = int(np.argmax(row))
    second = float(np.partition(row, -2)[-2]) if row.size > 1 else -np.inf
    return best, float(row[best] - second)


@dataclass(frozen=True)
class ReferenceAnswer:
    """The reference model's greedy answer to one chat prompt, token by token."""

    prompt: str
    ids: list[int]
    margins: list[float]
    texts: list[str]
    """texts[k] is the decoded text of the first k tokens (texts[0] == '')."""

    def certain_tokens(self, min_margin: float = DEFAULT_MIN_MARGIN) -> int:
        """How many leading tokens each won by at least ``min_margin``."""
        for i, margin in enumerate(self.margins):
            if margin < min_margin:
                return i
        return len(self.margins)

    def certain_text(self, min_margin: float = DEFAULT_MIN_MARGIN) -> str:
        # A prefix cut inside a multi-byte character decodes with U+FFFD at its end: drop it.
        return self.texts[self.certain_tokens(min_margin)].rstrip("\ufffd")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReferenceAnswer:
        return cls(
            prompt=str(data["prompt"]),
            ids=[int(i) for i in data["ids"]],
            margins=[float(m) for m in data["margins"]],
            texts=[str(t) for t in data["texts"]],
        )


@dataclass(frozen=True)
class ServedCheck:
    """One served answer against its reference."""

    prompt: str
    verdict: Verdict
    certain_tokens: int
    expected: str
    served: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def greedy_with_margins(
    step: Callable[[Sequence[int]], np.ndarray],
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    stop_ids: set[int],
) -> tuple[list[int], list[float]]:
    """Greedy decoding where ``step(ids)`` returns the next-token logits after ``ids``."""
    ids = list(prompt_ids)
    out: list[int] = []
    margins: list[float] = []
    for _ in range(max_new_tokens):
        token, margin = top_margin(step(ids))
        out.append(token)
        margins.append(margin)
        if token in stop_ids:
            break
        ids.append(token)
    return out, margins


def reference_answer(
    prompt: str, ids: Sequence[int], margins: Sequence[float], decode: Callable[[list[int]], str]
) -> ReferenceAnswer:
    """Bundle a greedy answer with the decoded text of each of its prefixes."""
    ids = list(ids)
    texts = [decode(ids[:k]) for k in range(len(ids) + 1)]
    return ReferenceAnswer(prompt, ids, [float(m) for m in margins], texts)


def _normal(text: str) -> str:
    return text.lstrip()


def check_served(
    reference: ReferenceAnswer, served: str, min_margin: float = DEFAULT_MIN_MARGIN
) -> ServedCheck:
    """Does ``served`` begin with the part of the reference answer that is certain?"""
    k = reference.certain_tokens(min_margin)
    expected = reference.certain_text(min_margin)
    if k == 0 or not expected.strip():
        return ServedCheck(
            reference.prompt,
            "undecided",
            k,
            expected,
            served,
            f"the reference's first token wins by {reference.margins[0] if reference.margins else 0:.2f}"
            f" < {min_margin:g}: a near-tie proves nothing",
        )
    if _normal(served).startswith(_normal(expected)):
        return ServedCheck(
            reference.prompt, "match", k, expected, served,
            f"the {k} certain tokens match",
        )  # fmt: skip
    return ServedCheck(
        reference.prompt,
        "mismatch",
        k,
        expected,
        served,
        f"served {served[: len(expected) + 20]!r} where the reference's first {k} tokens "
        f"(each winning by >= {min_margin:g}) read {expected!r}",
    )


def summarize_checks(checks: Sequence[ServedCheck]) -> dict[str, Any]:
    """One verdict for a pair: any mismatch fails it; no decided prompt leaves it undecided."""
    decided = [c for c in checks if c.verdict != "undecided"]
    bad = [c for c in decided if c.verdict == "mismatch"]
    if bad:
        verdict: Verdict = "mismatch"
    elif decided:
        verdict = "match"
    else:
        verdict = "undecided"
    return {
        "verdict": verdict,
        "decided": len(decided),
        "mismatched": len(bad),
        "prompts": len(checks),
        "checks": [c.to_dict() for c in checks],
    }
