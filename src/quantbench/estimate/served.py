"""The prompt as the server sees it: the tokens a chat template adds around a workload's messages.

A workload's traffic counts the tokens of its messages' text; a chat server wraps them in its
template first (role markers, separators and, for SmolLM2, a default system prompt of its own),
which on short chat turns is more than the text itself: 24 tokens of text became 61 served on
the default run. The estimate adds the template's tokens, counted with the model's own tokenizer
and template on every request's shape (how many earlier turns it resends, whether it has a
system message), and the tag the harness puts before a conversation's first message to keep
prompts unique (``unique_prompts``: ``[c4-r0-17] ``, resent with the history), so a prediction
is made at the length the engine computes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from quantbench.load.plan import Conversation
from quantbench.load.prompts import PromptItem
from quantbench.load.spec import WorkloadSpec
from quantbench.load.tokens import load_counter
from quantbench.workloads.traffic import Traffic

PLACEHOLDER = "x"
EXAMPLE_TAG = "c4-r0-17"
"""A tag as the harness writes it (``quantbench.load.dispatch``: point, repeat, index)."""


def _messages(turn: int, system: bool) -> list[dict[str, str]]:
    out = [{"role": "system", "content": PLACEHOLDER}] if system else []
    for _ in range(turn):
        out += [
            {"role": "user", "content": PLACEHOLDER},
            {"role": "assistant", "content": PLACEHOLDER},
        ]
    return [*out, {"role": "user", "content": PLACEHOLDER}]


def template_tokens(
    tokenizer: Path,
    conversations: Sequence[Conversation],
    tagged: bool = True,
    api: str = "chat",
) -> float:
    """Mean tokens the chat template of ``tokenizer`` (a local model folder) adds to each
    request of ``conversations`` beyond its messages' text, with the harness's tag on the first
    message where ``tagged`` (a completions prompt gets the tag only)."""
    counter = load_counter(tokenizer)
    text = counter.count_text(PLACEHOLDER)
    tag = counter.count_text(f"[{EXAMPLE_TAG}] {PLACEHOLDER}") - text if tagged else 0
    by_shape: dict[tuple[int, bool], int] = {}
    total = requests = 0
    for conv in conversations:
        if conv.raw_prompt is not None or api != "chat":
            total += tag * len(conv.turns)
            requests += len(conv.turns)
            continue
        for turn in range(len(conv.turns)):
            shape = (turn, conv.system is not None)
            if shape not in by_shape:
                messages = _messages(*shape)
                item = PromptItem(id="template", max_tokens=1, messages=messages)
                by_shape[shape] = counter.count_prompt(item, "chat") - len(messages) * text
            total += by_shape[shape] + tag
            requests += 1
    return total / requests if requests else 0.0


def served_template_tokens(
    tokenizer: Path, workloads: Mapping[str, WorkloadSpec], traffic: Mapping[str, Traffic]
) -> dict[str, float]:
    """:func:`template_tokens` of every workload whose traffic is given, as its spec sends it."""
    return {
        name: template_tokens(tokenizer, traffic[name].conversations, spec.unique_prompts, spec.api)
        for name, spec in workloads.items()
        if name in traffic
    }
