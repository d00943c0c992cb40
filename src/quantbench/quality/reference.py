"""Reference answers for the served check: a variant's own offline backend, answering greedily.

Each answer keeps the margin of every token (see :mod:`quantbench.fidelity`), so a server's answer
can later be held against the part of it that does not hang on a near-tie.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quantbench.chat import chat_ids
from quantbench.fidelity import ReferenceAnswer, reference_answer
from quantbench.quality.backends import Backend


def reference_answers(
    backend: Backend,
    tokenizer: Any,
    prompts: Sequence[str],
    max_new_tokens: int,
    stop_ids: set[int],
) -> list[ReferenceAnswer]:
    """Greedy answers (with margins) to single-turn chats rendered by the tokenizer's template."""
    out = []
    for prompt in prompts:
        ids = chat_ids(tokenizer, [{"role": "user", "content": prompt}], True)
        tokens, margins = backend.generate_scored(ids, max_new_tokens, stop_ids)
        out.append(
            reference_answer(
                prompt,
                tokens,
                margins,
                lambda t: str(tokenizer.decode(t, skip_special_tokens=True)),
            )
        )
    return out
