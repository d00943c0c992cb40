"""Token counts the server did not report, counted in the parent process after the run.

The load process never imports a tokenizer (see :mod:`quantbench.load`). Where a stream carried
no ``usage``, output tokens are counted here with the model's tokenizer on the generated text;
without a tokenizer, the number of content chunks stands in (one token per chunk, which is what
most engines stream), and the record says so in ``tokens_source``.

A tokenizer is a local path: a ``tokenizer.json`` file (read with the ``tokenizers`` library) or a
model directory (read with ``transformers.AutoTokenizer``, which also applies the chat template
to count chat prompts). Both libraries are imported only when a tokenizer is asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from quantbench.load.records import RequestRecord
from quantbench.workloads.prompts import PromptItem


class TokenCounter(Protocol):
    def count_text(self, text: str) -> int: ...
    def count_prompt(self, item: PromptItem, api: str) -> int: ...
    def cut(self, text: str, n_tokens: int) -> str: ...


class _FastTokenizerFile:
    """A bare ``tokenizers`` tokenizer: no chat template, so chat prompts count their text."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))

    def count_text(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_prompt(self, item: PromptItem, api: str) -> int:
        return self.count_text(item.as_prompt())

    def cut(self, text: str, n_tokens: int) -> str:
        ids = self._tok.encode(text, add_special_tokens=False).ids[:n_tokens]
        return self._tok.decode(ids)


class _HFTokenizer:
    def __init__(self, path: Path) -> None:
        from transformers import AutoTokenizer

        self._tok: Any = AutoTokenizer.from_pretrained(str(path))

    def count_text(self, text: str) -> int:
        return len(self._tok(text, add_special_tokens=False)["input_ids"])

    def count_prompt(self, item: PromptItem, api: str) -> int:
        if api == "chat" and getattr(self._tok, "chat_template", None):
            ids = self._tok.apply_chat_template(
                item.as_messages(), add_generation_prompt=True, tokenize=True
            )
            if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding (a
                ids = ids["input_ids"]  # UserDict, not a dict: len() would count its keys)
            return len(ids)
        return len(self._tok(item.as_prompt())["input_ids"])

    def cut(self, text: str, n_tokens: int) -> str:
        ids = self._tok(text, add_special_tokens=False)["input_ids"][:n_tokens]
        return str(self._tok.decode(ids))


def load_counter(path: Path | str) -> TokenCounter:
    p = Path(path)
    if p.is_file() and p.suffix == ".json":
        return _FastTokenizerFile(p)
    if p.is_dir():
        if not (p / "tokenizer.json").exists() and not (p / "tokenizer_config.json").exists():
            raise ValueError(f"{p} holds no tokenizer (no tokenizer.json or tokenizer_config.json)")
        return _HFTokenizer(p)
    raise ValueError(
        f"tokenizer {p} not found: give a tokenizer.json file or a local model directory "
        "(nothing is downloaded)"
    )


def fill_token_counts(
    records: Iterable[RequestRecord],
    counter: TokenCounter | None,
    prompts: dict[str, PromptItem],
    api: str,
) -> None:
    """Complete prompt/output token counts in place where the server gave none."""
    prompt_cache: dict[str, int] = {}
    for rec in records:
        if rec.status == "failed" and not rec.chunk_times:
            continue
        if rec.tokens_source != "usage" or rec.output_tokens is None:
            if counter is not None and rec.output_text is not None:
                rec.output_tokens = counter.count_text(rec.output_text)
                rec.tokens_source = "tokenizer"
            else:
                rec.output_tokens = sum(rec.chunk_tokens)
                rec.tokens_source = "chunks"
        if rec.prompt_tokens is None and counter is not None and rec.prompt_id in prompts:
            if rec.prompt_id not in prompt_cache:
                prompt_cache[rec.prompt_id] = counter.count_prompt(prompts[rec.prompt_id], api)
            rec.prompt_tokens = prompt_cache[rec.prompt_id]
