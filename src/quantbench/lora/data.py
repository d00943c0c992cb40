"""Training chats -> token ids with the loss on the assistant's answer only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantbench.chat import chat_ids
from quantbench.errors import UserError
from quantbench.textfile import read_utf8

IGNORE = -100  # label value the loss skips


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]


def load_chats(path: str | Path) -> list[list[dict[str, str]]]:
    """Read a JSONL of {"messages": [...]} chats that end with an assistant turn."""
    chats = []
    for lineno, line in enumerate(read_utf8(path, "training chats").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
            roles = [m["role"] for m in messages]
            _ = [str(m["content"]) for m in messages]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserError(
                f'{path}:{lineno}: expected {{"messages": [{{"role", "content"}}, ...]}} ({exc})'
            ) from None
        # a null or a number would reach the template as the text "None" or "3"
        bad = [i for i, m in enumerate(messages) if not isinstance(m["content"], str)]
        if bad:
            raise UserError(
                f"{path}:{lineno}: message {bad[0]}'s content is "
                f"{messages[bad[0]]['content']!r}, not text; write the turn's text"
            )
        if not messages or roles[-1] != "assistant":
            raise UserError(f"{path}:{lineno}: a training chat must end with an assistant turn")
        chats.append(messages)
    if not chats:
        raise UserError(f"{path}: no training chats found")
    return chats


def encode(tokenizer: Any, messages: list[dict[str, str]], max_length: int) -> Example:
    """Tokenize a chat; label only the final assistant turn's tokens."""
    prompt = chat_ids(tokenizer, messages[:-1], add_generation_prompt=True)
    full = chat_ids(tokenizer, messages, add_generation_prompt=False)
    if full[: len(prompt)] != prompt:
        raise UserError("the chat template renders the prompt differently inside the full chat")
    full = full[:max_length]
    labels = [IGNORE] * min(len(prompt), len(full)) + full[len(prompt) :]
    return Example(input_ids=full, labels=labels)


def collate(batch: list[Example], pad_id: int) -> dict[str, Any]:
    """Right-pad a batch into tensors."""
    import torch

    width = max(len(e.input_ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, example in enumerate(batch):
        n = len(example.input_ids)
        ids[row, :n] = torch.tensor(example.input_ids)
        labels[row, :n] = torch.tensor(example.labels)
        mask[row, :n] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}
