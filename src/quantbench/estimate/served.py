"""The prompt as the server sees it: the tokens a chat template adds around a workload's messages.

A workload's traffic counts the tokens of its messages' text; a chat server wraps them in its
template first (role markers, separators and, for SmolLM2, a default system prompt of its own),
which on short chat turns is more than the text itself: 24 tokens of text became 61 served on
the default run. The estimate adds the template's tokens, counted with the model's own tokenizer
and template on every request's shape (how many earlier turns it resends, whether it has a
system message), so a prediction is made at the length the engine computes. The unique marker
(``unique_prompts``) is in the traffic's text already, within each first message's length
(:mod:`quantbench.workloads.marker`); only a conversation made without its room gets it on top
here, as the harness then sends it (resent with the history).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantbench.load.tokens import load_counter
from quantbench.workloads.marker import PLACEHOLDER as MARKER
from quantbench.workloads.marker import has_room
from quantbench.workloads.plan import Conversation
from quantbench.workloads.prompts import PromptItem
from quantbench.workloads.spec import WorkloadSpec
from quantbench.workloads.stats import prompt_lengths
from quantbench.workloads.traffic import Traffic

PLACEHOLDER = "x"


@functools.lru_cache(maxsize=4)
def _counter(tokenizer: Path) -> Any:
    """The tokenizer, loaded once per folder (each workload and both profiles use it)."""
    return load_counter(tokenizer)


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
    request of ``conversations`` beyond its messages' text, with the unique marker on top where
    ``tagged`` and the first message made no room for it (a completions prompt gets the marker
    only)."""
    requests = _requests(tokenizer, conversations, tagged, api)
    return sum(r.served - r.text for r in requests) / len(requests) if requests else 0.0


def _template_count(counter: Any, messages: list[dict[str, str]], generation: bool) -> int:
    item = PromptItem(id="template", max_tokens=1, messages=messages)
    if generation:
        return counter.count_prompt(item, "chat")
    tok = counter._tok  # the HF tokenizer: a prompt closed without the assistant's opening
    ids = tok.apply_chat_template(messages, add_generation_prompt=False, tokenize=True)
    return len(ids if isinstance(ids, list) else ids["input_ids"])


@dataclass(frozen=True)
class _Request:
    text: float  # tokens of its messages' text, as the traffic counts them
    served: float  # the prompt as the server sees it: template and marker included
    shared: float  # of it, a prefix an earlier request left in a cache
    common: float  # of that, the part other conversations share too


def prompt_profile(
    tokenizer: Path,
    conversations: Sequence[Conversation],
    tagged: bool = True,
    api: str = "chat",
) -> list[tuple[float, float, float]]:
    """Per request: (prompt tokens as served, of them a prefix a cache could hold from an
    earlier request, of them the part other conversations share too). A later turn shares
    everything but its own new message with the conversation's previous request and its answer;
    every turn shares a system prompt other conversations send too (the template's own head,
    which every request shares, is the probe's to measure: ``StepFit.cached_prompt_tokens``)."""
    return [
        (r.served, r.shared, r.common) for r in _requests(tokenizer, conversations, tagged, api)
    ]


def _requests(
    tokenizer: Path, conversations: Sequence[Conversation], tagged: bool, api: str
) -> list[_Request]:
    """Each request's text, served, shared and common tokens (see :func:`prompt_profile`)."""
    from collections import Counter

    counter = _counter(Path(tokenizer))
    x = counter.count_text(PLACEHOLDER)
    # the marker on top, where a conversation's first message holds no room for it
    on_top = counter.count_text(f"{MARKER} {PLACEHOLDER}") - x if tagged else 0
    chat = api == "chat"
    extra: dict[tuple[int, bool], float] = {}
    new_turn: dict[tuple[int, bool], float] = {}
    head: dict[str, float] = {}
    systems = Counter(c.system for c in conversations if c.system is not None)
    out: list[_Request] = []
    seen: set[str] = set()
    for conv in conversations:
        system = conv.system is not None
        tag = 0 if has_room(conv) else on_top
        lengths = prompt_lengths(conv, counter.count_text)
        common = 0.0
        if chat and conv.system is not None and systems[conv.system] > 1:
            if conv.system not in head:  # the system message as the template closes it
                message = [{"role": "system", "content": conv.system}]
                head[conv.system] = float(_template_count(counter, message, False))
            common = head[conv.system]
        for turn, ((raw, reused), t) in enumerate(zip(lengths, conv.turns, strict=True)):
            if not chat or conv.raw_prompt is not None:
                out.append(_Request(raw, raw + tag, float(reused), 0.0))
                continue
            shape = (turn, system)
            if shape not in extra:
                messages = _messages(*shape)
                full = counter.count_prompt(PromptItem(id="t", max_tokens=1, messages=messages),
                                            "chat")  # fmt: skip
                extra[shape] = full - len(messages) * x
                # what the last message adds beyond the prompt before it, closed
                before = messages[:-1]
                new_turn[shape] = full - (_template_count(counter, before, False) if before else 0)
            served = raw + extra[shape] + tag
            user = counter.count_text(t.content)
            if turn > 0:
                shared = served - (user - x + new_turn[shape])
            elif conv.system is not None and conv.system in seen:
                shared = served - (user + tag - x + new_turn[shape])
            else:
                shared = 0.0
            if conv.system is not None:
                seen.add(conv.system)
            others = common if conv.system in seen and (turn > 0 or shared > 0) else 0.0
            shared = max(shared, 0.0)
            out.append(_Request(raw, served, shared, min(others, shared)))
    return out


def served_prompt_profiles(
    tokenizer: Path, workloads: Mapping[str, WorkloadSpec], traffic: Mapping[str, Traffic]
) -> dict[str, list[tuple[float, float, float]]]:
    """:func:`prompt_profile` of every workload whose traffic is given, as its spec sends it."""
    return {
        name: prompt_profile(tokenizer, traffic[name].conversations, spec.unique_prompts, spec.api)
        for name, spec in workloads.items()
        if name in traffic
    }
