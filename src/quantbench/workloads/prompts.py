"""Prompts for a run: lines of a JSONL dataset, or random prompts of a given length.

Random prompts are sequences of common English words, each of which is one token in the usual
BPE vocabularies, so ``input_len`` words are close to ``input_len`` tokens without loading a
tokenizer; when a tokenizer is given the prompt is cut to exactly ``input_len`` of its tokens.
The server's ``usage`` (or the tokenizer after the run) gives the exact counts either way.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantbench.workloads.files import json_object_lines
from quantbench.workloads.spec import DatasetPrompts, RandomPrompts

# Short, frequent words: single tokens (with their leading space) in GPT-2, Llama and Qwen BPEs.
_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there one all we their has been if more when "
    "will would who so no out up into do any time my can than only its new some could these "
    "two may first then other about over such after most also made many before must through "
    "back years where much your way well down should because each just those people how too "
    "little state good very make world still own see men work long get here between both "
    "life being under never day same another know while last might us great old year off "
    "come since against go came right used take three place"
)
_WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class PromptItem:
    """One prompt and its output limit."""

    id: str
    max_tokens: int
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    scenario: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def as_messages(self) -> list[dict[str, Any]]:
        if self.messages is not None:
            return self.messages
        return [{"role": "user", "content": self.prompt or ""}]

    def as_prompt(self) -> str:
        """Text for the completions API: a chat dataset's message contents, one per line."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(str(m.get("content", "")) for m in self.messages or [])


class DatasetError(ValueError):
    """A dataset line that cannot be used, named by file and line number."""


def load_dataset(spec: DatasetPrompts) -> list[PromptItem]:
    path = Path(spec.path)
    if not path.is_file():
        raise DatasetError(f"prompt dataset {path} does not exist (prompts.path in the workload)")
    items: list[PromptItem] = []
    seen: set[str] = set()
    for where, row in json_object_lines(path, "prompts.path", DatasetError):
        items.append(_item_from_row(row, where, spec))
        if items[-1].id in seen:
            raise DatasetError(f"{where}: id {items[-1].id!r} appears twice; ids must be unique")
        seen.add(items[-1].id)
    if not items:
        raise DatasetError(f"prompt dataset {path} has no lines")
    return items


def _item_from_row(row: dict[str, Any], where: str, spec: DatasetPrompts) -> PromptItem:
    if "id" not in row:
        raise DatasetError(f"{where}: missing 'id'")
    messages, prompt = row.get("messages"), row.get("prompt")
    if (messages is None) == (prompt is None):
        raise DatasetError(f"{where}: give exactly one of 'messages' (chat) or 'prompt' (text)")
    if messages is not None and (
        not isinstance(messages, list)
        or not messages
        or not all(
            isinstance(m, dict) and "role" in m and isinstance(m.get("content"), str)
            for m in messages
        )
    ):
        raise DatasetError(
            f"{where}: 'messages' must be a non-empty list of {{'role': ..., 'content': ...}}, "
            "each content text"
        )
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        raise DatasetError(f"{where}: 'prompt' must be a non-empty string, got {prompt!r}")
    max_tokens = (
        spec.max_tokens if spec.override_max_tokens else row.get("max_tokens", spec.max_tokens)
    )
    if max_tokens is None:
        raise DatasetError(
            f"{where}: no 'max_tokens' on the line and none in the workload "
            "(set prompts.max_tokens)"
        )
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
        raise DatasetError(f"{where}: 'max_tokens' must be a positive integer, got {max_tokens!r}")
    known = {"id", "messages", "prompt", "max_tokens", "scenario"}
    return PromptItem(
        id=str(row["id"]),
        max_tokens=max_tokens,
        messages=messages,
        prompt=prompt,
        scenario=row.get("scenario"),
        meta={k: v for k, v in row.items() if k not in known},
    )


def _jittered(length: int, ratio: float, rng: random.Random) -> int:
    if ratio == 0:
        return length
    lo, hi = max(1, round(length * (1 - ratio))), max(1, round(length * (1 + ratio)))
    return rng.randint(lo, hi)


def random_prompts(
    spec: RandomPrompts,
    seed: int,
    cut_to_tokens: Callable[[str, int], str] | None = None,
) -> list[PromptItem]:
    """``spec.num_prompts`` random prompts; ``cut_to_tokens(text, n)`` makes lengths exact."""
    rng = random.Random(seed)
    items = []
    for i in range(spec.num_prompts):
        n_in = _jittered(spec.input_len, spec.range_ratio, rng)
        n_out = _jittered(spec.output_len, spec.range_ratio, rng)
        # A leading unique number keeps prompts distinct, so no prefix cache serves them all.
        words = [str(i)] + [rng.choice(_WORDS) for _ in range(max(0, n_in - 1))]
        text = " ".join(words)
        if cut_to_tokens is not None:
            text = cut_to_tokens(text + " " + " ".join(rng.choice(_WORDS) for _ in range(8)), n_in)
        items.append(PromptItem(id=f"random-{i:05d}", max_tokens=n_out, prompt=text))
    return items


def ordered(items: list[PromptItem], seed: int, shuffle: bool) -> list[PromptItem]:
    """The order requests take the prompts in (they cycle if the run needs more)."""
    if not shuffle:
        return list(items)
    out = list(items)
    random.Random(seed).shuffle(out)
    return out
