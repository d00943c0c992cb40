"""Chat formatting and greedy answers from a transformers model (held-out questions, checks)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# questions answered per forward pass when scoring a held-out set: fine-tuning's before/after
# (64 questions, one pass); on 2 cores 64 answered 128 questions in 16 s where 16 took 24
ANSWER_BATCH = 64


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
    answers = hf_answers_fn(model, tokenizer, max_new_tokens, batch_size=1)
    return lambda question: answers([question])[0]


def hf_answers_fn(
    model: Any, tokenizer: Any, max_new_tokens: int, batch_size: int = ANSWER_BATCH
) -> Callable[[Sequence[str]], list[str]]:
    """questions -> greedy answers, each asked as a single user turn, `batch_size` at a time.

    The questions of a batch are padded on the left with an attention mask, so each is answered
    as if alone (generate derives positions from the mask): the fine-tune is scored on hundreds
    of held-out questions, and a batch shares each decoding step's pass over the weights."""
    import torch

    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )

    def answers(questions: Sequence[str]) -> list[str]:
        out: list[str] = []
        for lo in range(0, len(questions), batch_size):
            chats = [
                chat_ids(tokenizer, [{"role": "user", "content": q}], True)
                for q in questions[lo : lo + batch_size]
            ]
            width = max(len(ids) for ids in chats)
            inputs = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in chats])
            mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in chats])
            with torch.inference_mode():
                generated = model.generate(
                    input_ids=inputs.to(model.device),
                    attention_mask=mask.to(model.device),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=pad_id,
                )
            out += [
                tokenizer.decode(row[width:], skip_special_tokens=True).strip() for row in generated
            ]
        return out

    return answers
