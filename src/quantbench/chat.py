"""Chat formatting and greedy answers from a transformers model (held-out questions, checks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def chat_ids(
    tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool
) -> list[int]:
    """Token ids of a chat rendered with the tokenizer's own chat template."""
    out = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=True
    )
    return list(out["input_ids"])


def hf_answer_fn(model: Any, tokenizer: Any, max_new_tokens: int) -> Callable[[str], str]:
    """question -> greedy answer, asked as a single user turn."""
    import torch

    def answer(question: str) -> str:
        ids = chat_ids(tokenizer, [{"role": "user", "content": question}], True)
        inputs = torch.tensor([ids], device=model.device)
        with torch.inference_mode():
            out = model.generate(
                input_ids=inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            )
        return tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True).strip()

    return answer
