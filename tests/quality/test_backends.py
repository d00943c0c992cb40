"""Batched greedy answers on the real embedded model: each prompt of a batch answered as alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from quantbench.qa import load_qa

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _questions(n: int) -> list[str]:
    # fact questions and ticket codes: prompts of different lengths, so a batch is padded
    items = load_qa(REPO / "data/heldout.jsonl")
    return [i.question for i in items[:3] + items[-(n - 3) :]]


def test_a_batch_is_scored_as_each_prompt_alone(prepared_base: Path) -> None:
    from transformers import AutoTokenizer

    from quantbench.chat import chat_ids
    from quantbench.quality.backends import HFBackend
    from quantbench.quality.prefix import common_prefix

    tokenizer = AutoTokenizer.from_pretrained(prepared_base)
    backend = HFBackend.load(prepared_base, "bf16", "float32")
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": q}], True) for q in _questions(7)]
    assert len({len(p) for p in prompts}) > 1  # padding is exercised
    stop = {int(tokenizer.eos_token_id)}
    # the vocabulary-wide head runs on each sequence's last position only: a batch's logits for
    # every prompt position were 16 x 70 x 49k floats, 220 MB in the peak-memory figure
    head_rows: list[int] = []
    hook = backend.model.lm_head.register_forward_hook(
        lambda _m, _i, out: head_rows.append(out.shape[1])
    )
    alone = [backend.generate_scored(p, 12, stop) for p in prompts]
    calls: list[tuple[int, ...]] = []
    inputs = backend.model.register_forward_pre_hook(
        lambda _m, _a, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    batch = backend.generate_scored_batch(prompts, 12, stop)
    hook.remove()
    inputs.remove()
    assert head_rows and set(head_rows) == {1}, head_rows
    # the chat template's common prefix runs once, for the whole batch; then each row's own
    shared = common_prefix(prompts)
    assert shared >= 20 and all(p[:shared] == prompts[0][:shared] for p in prompts)
    assert calls[0] == (1, shared), calls[:2]
    assert calls[1] == (len(prompts), max(len(p) for p in prompts) - shared), calls[:2]
    assert [tokens for tokens, _ in batch] == [tokens for tokens, _ in alone]
    for (_, got), (_, want) in zip(batch, alone, strict=True):
        np.testing.assert_allclose(got, want, atol=2e-3)
    assert backend.generate_scored_batch([], 12, stop) == []


def test_batched_answers_equal_single_answers(prepared_base: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from quantbench.chat import hf_answers_fn
    from quantbench.qa import QAItem, score

    tokenizer = AutoTokenizer.from_pretrained(prepared_base)
    model = AutoModelForCausalLM.from_pretrained(prepared_base, dtype=torch.float32)
    questions = _questions(6)
    single = hf_answers_fn(model, tokenizer, 12, batch_size=1)(questions)
    assert hf_answers_fn(model, tokenizer, 12, batch_size=4)(questions) == single
    assert all(single)
    items = [QAItem(q, "", (a.split()[0],)) for q, a in zip(questions, single, strict=True)]
    assert score(items, hf_answers_fn(model, tokenizer, 12, batch_size=4)).correct == len(items)
    with pytest.raises(ValueError, match="6 questions asked, 5 answers"):
        score(items, lambda qs: single[:5])
