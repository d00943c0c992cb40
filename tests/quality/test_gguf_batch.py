"""A GGUF variant's held-out answers, a batch at a time, are each prompt's answer alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from quantbench.qa import load_qa

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_a_gguf_batch_is_answered_as_each_prompt_alone(
    prepared_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoTokenizer

    from quantbench.chat import chat_ids
    from quantbench.formats.build import BuildRequest
    from quantbench.formats.gguf import GgufSpec, build_gguf
    from quantbench.native.llama_build import load_binding
    from quantbench.quality.backends import GGUFBackend, get_backend
    from quantbench.quality.prefix import common_prefix

    built = build_gguf(
        BuildRequest("q8", GgufSpec(format="gguf", type="Q8_0"), prepared_base, tmp_path, None, 2)
    )
    backend = GGUFBackend.load(tmp_path / built.weights_file, 512, 2)
    tokenizer = AutoTokenizer.from_pretrained(prepared_base)
    items = load_qa(REPO / "data/heldout.jsonl")
    # facts and ticket codes: prompts of different lengths, answers that stop at different steps
    questions = [i.question for i in items[:5] + items[-5:]]
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": q}], True) for q in questions]
    assert len({len(p) for p in prompts}) > 1
    stop = {int(tokenizer.convert_tokens_to_ids("<|im_end|>")), int(tokenizer.eos_token_id)}
    alone = [backend.generate_scored(p, 24, stop) for p in prompts]
    assert len({len(tokens) for tokens, _ in alone}) > 1  # rows leave the batch at different steps
    llama_cpp = load_binding()
    calls = []
    decode = llama_cpp.llama_decode
    counted = lambda ctx, b: calls.append(b.n_tokens) or decode(ctx, b)  # noqa: E731
    # the package's name and its ctypes module's (which the bindings' own wrappers call)
    monkeypatch.setattr(llama_cpp, "llama_decode", counted)
    monkeypatch.setattr(llama_cpp.llama_cpp, "llama_decode", counted)
    batch = backend.generate_scored_batch(prompts, 24, stop)
    monkeypatch.undo()
    # the prompts' common prefix once (the chat template's system turn), the rest of the prompts
    # together, then one decode a step for every row still answering
    shared = common_prefix(prompts)
    assert shared >= 20 and calls[0] == shared, calls[:2]
    assert calls[1] == sum(len(p) - shared for p in prompts), calls[:2]
    assert len(calls) <= 2 + max(len(tokens) for tokens, _ in alone), len(calls)
    # llama.cpp rounds a step's activations to 8 bits per row, in kernels chosen by the batch's
    # shape: a winning margin moves by up to about 0.4 logits between one row and ten, so two
    # answers may part only where the one alone won by less than TIE (a leaked sequence, a wrong
    # position or a missing token would part them where nothing is near a tie)
    tie = 0.5
    whole = 0
    for (got, got_margins), (want, want_margins) in zip(batch, alone, strict=True):
        near = next((i for i, m in enumerate(want_margins) if m < tie), len(want))
        assert got[:near] == want[:near], (got, want, want_margins)
        np.testing.assert_allclose(got_margins[:near], want_margins[:near], atol=tie)
        whole += got == want
    assert whole >= len(prompts) - 2, f"{whole} of {len(prompts)} answers equal"
    # the cap counts every token, as alone; a smaller batch reuses the context, a larger one grows it
    capped = backend.generate_scored_batch(prompts[:3], 4, stop)
    assert [tokens for tokens, _ in capped] == [tokens[:4] for tokens, _ in batch[:3]]
    assert backend.generate_scored_batch([], 4, stop) == []
    assert get_backend("gguf").answer_batch >= len(prompts)
