"""What a workload is made of, computed from its prompts: lengths, turns, think times, and the
share of prompt tokens a prefix cache could serve.

Prefix reuse is computed, not assumed. In send order, a request's prompt is its system message,
the history it resends (every earlier turn and the answer to it) and its own message; the part a
cache could hold is the longest prefix it shares with an earlier prompt (plus that prompt's
answer, which the server generated and so has in its cache too): for a later turn, the whole
previous turn and its answer; for a first turn, a system prompt shared with earlier
conversations. The share is those tokens over all prompt tokens. (A real cache works in blocks of
16 to 256 tokens and can evict; the engine's own counters, where it reports them, give the share
that was served from it, beside this one.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from quantbench.schemas.workloads import Spread, WorkloadSummary
from quantbench.workloads.plan import Conversation

Count = Callable[[str], int]


def words(text: str) -> int:
    return len(text.split())


def _describe(values: Sequence[float]) -> Spread | None:
    if not values:
        return None
    xs = np.asarray(values, dtype=float)
    return Spread(
        count=int(xs.size),
        mean=float(xs.mean()),
        p50=float(np.percentile(xs, 50)),
        p90=float(np.percentile(xs, 90)),
        max=float(xs.max()),
    )


def prompt_lengths(conv: Conversation, count: Count) -> list[tuple[int, int]]:
    """Per turn: (prompt tokens resent, of them a prefix an earlier turn of this conversation
    already sent with its answer)."""
    system = count(conv.system) if conv.system else 0
    sent = system
    out = []
    history = 0  # tokens of earlier turns and their answers
    for k, turn in enumerate(conv.turns):
        user = count(turn.content)
        prompt = system + history + user
        reused = (system + history) if k > 0 else 0
        out.append((prompt, reused))
        history += user + turn.max_tokens
        sent += user
    return out


def summarize(
    conversations: Sequence[Conversation], count: Count = words, context: int | None = None
) -> WorkloadSummary:
    """Length statistics, think times and the prefix-reuse share of a workload."""
    inputs: list[float] = []
    outputs: list[float] = []
    totals: list[float] = []
    thinks: list[float] = []
    prompt_tokens = reusable = 0
    systems_seen: set[str] = set()
    for conv in conversations:
        for k, ((prompt, reused), turn) in enumerate(
            zip(prompt_lengths(conv, count), conv.turns, strict=True)
        ):
            if k == 0 and conv.system:
                if conv.system in systems_seen:
                    reused += count(conv.system)
                systems_seen.add(conv.system)
            inputs.append(prompt)
            outputs.append(turn.max_tokens)
            totals.append(prompt + turn.max_tokens)
            prompt_tokens += prompt
            reusable += reused
            if k > 0:
                thinks.append(turn.think_s)
    turns = [len(c.turns) for c in conversations]
    return WorkloadSummary(
        conversations=len(conversations),
        requests=len(inputs),
        turns=_describe(turns),
        input_tokens=_describe(inputs),
        output_tokens=_describe(outputs),
        think_s=_describe(thinks),
        prefix_reuse_share=(reusable / prompt_tokens) if prompt_tokens else 0.0,
        counted_with="tokenizer" if count is not words else "words",
        context=context,
        longest_request=int(max(totals, default=0)) if context is not None else None,
    )


def fit_to_context(
    conversations: Sequence[Conversation], count: Count, context: int
) -> tuple[list[Conversation], int]:
    """Drop the turns whose prompt plus answer would not fit ``context`` tokens (a conversation's
    history only grows, so every later turn goes too); returns the kept ones and how many turns
    were dropped. A conversation whose first turn does not fit is dropped whole."""
    from dataclasses import replace

    kept: list[Conversation] = []
    dropped = 0
    for conv in conversations:
        fits = 0
        for (prompt, _), turn in zip(prompt_lengths(conv, count), conv.turns, strict=True):
            if prompt + turn.max_tokens > context:
                break
            fits += 1
        dropped += len(conv.turns) - fits
        if fits:
            kept.append(replace(conv, turns=list(conv.turns[:fits])))
    return kept, dropped
