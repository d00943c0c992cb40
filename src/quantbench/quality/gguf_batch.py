"""Greedy answers to many prompts at once through llama.cpp: one decode a step for the batch.

The bindings' ``Llama`` object holds one sequence, so a GGUF variant answered the 253 held-out
questions one at a time: 79 s of its 95-s evaluation on 2 cores, where a transformers variant
answers 64 per forward pass. llama.cpp itself decodes many sequences in one call
(``llama_decode`` on a batch whose tokens carry sequence ids), as llama-server does for its
slots. :class:`BatchDecoder` opens a second context on the variant's loaded weights that holds
a batch's sequences, each in its own stream of KV cells, and feeds it the prompts of a batch
together, then each step's next tokens together: 128 questions took 28 s where one at a time
they took 58 (16 at a time, on 2 cores).

Each sequence attends only to its own cells (its ``seq_id``) and numbers its positions from 0,
so each row is its prompt alone but for llama.cpp's arithmetic: it rounds a step's activations
to 8 bits per row in kernels the batch's shape chooses, which moved a winning margin by up to
about 0.4 logits against one question alone. On the embedded model's Q8_0, 64 of 64 held-out
answers were the same tokens as one at a time; tests/quality/test_gguf_batch.py checks that
answers part only at such near-ties. The argmax loop is the backend's own (no
sampler chain), so "greedy" means what it means for every other variant.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from quantbench.fidelity import top_margin
from quantbench.native import llama_build
from quantbench.quality.prefix import common_prefix


class BatchDecoder:
    """Prompts answered together on a loaded ``llama_cpp.Llama``'s weights (the caller sizes
    the batches: ``quality.backends.BackendKind.answer_batch``)."""

    def __init__(self, llm: Any, threads: int) -> None:
        self._llm = llm
        self._threads = threads
        self._context: Any = None
        self._cells = 0
        self._sequences = 0

    def _open(self, cells: int, sequences: int) -> Any:
        """A context of at least ``cells`` KV cells for ``sequences`` sequences (reused while it
        is big enough: making one allocates its KV cells)."""
        if self._context is not None and cells <= self._cells and sequences <= self._sequences:
            return self._context

        llama_cpp = llama_build.load_binding()
        from llama_cpp import _internals  # the pinned bindings' own context wrapper

        if self._context is not None:
            self._context.close()
        # the single-sequence context's own parameters (flash attention off, as there: the
        # library's default, auto, turns it on and moved logits by up to 0.7), resized
        params = llama_cpp.llama_context_params()
        ctypes.pointer(params)[0] = self._llm.context_params
        params.n_seq_max = sequences
        params.n_ctx = params.n_batch = params.n_ubatch = cells
        params.n_threads = params.n_threads_batch = self._threads
        # a stream of cells per sequence (n_ctx / n_seq_max each), so a row attends over its
        # own cells only: over one unified pool the batch took 35 s where this took 28 (128
        # questions at 16; flash attention on took 22, with answers further from these)
        params.kv_unified = False
        # registered on the model's exit stack by the wrapper: freed before the weights are
        self._context = _internals.LlamaContext(
            model=self._llm._model, params=params, verbose=False
        )
        self._cells, self._sequences = cells, sequences
        return self._context

    def answer(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: set[int]
    ) -> list[tuple[list[int], list[float]]]:
        """Each prompt's greedy tokens (up to and including a stop token, at most
        ``max_new_tokens``) and the logit margin each won by, all prompts in one batch."""
        llama_cpp = llama_build.load_binding()
        if not prompts:
            return []
        if any(not p for p in prompts):
            raise ValueError("an empty prompt has no next token to answer from")
        prefill = sum(len(p) for p in prompts)
        longest = max(len(p) for p in prompts) + max_new_tokens
        context = self._open(longest * len(prompts), len(prompts))
        ctx = context.ctx
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        vocab = self._llm.n_vocab()
        batch = llama_cpp.llama_batch_init(max(prefill, len(prompts)), 0, 1)
        try:

            def put(slot: int, token: int, pos: int, seq: int, wants_logits: bool) -> None:
                batch.token[slot] = token
                batch.pos[slot] = pos
                batch.n_seq_id[slot] = 1
                batch.seq_id[slot][0] = seq
                batch.logits[slot] = wants_logits

            def decode(n: int) -> None:
                batch.n_tokens = n
                status = llama_cpp.llama_decode(ctx, batch)
                if status != 0:
                    raise RuntimeError(f"llama_decode failed (status {status}) on {n} tokens")

            # the prompts' common prefix once, in the first sequence's stream, then copied into
            # every other's (a whole-stream copy: what llama.cpp supports across streams)
            shared = common_prefix(prompts)
            if shared:
                for pos in range(shared):
                    put(pos, int(prompts[0][pos]), pos, 0, False)
                decode(shared)
                memory = llama_cpp.llama_get_memory(ctx)
                for seq in range(1, len(prompts)):
                    llama_cpp.llama_memory_seq_cp(memory, 0, seq, -1, -1)
            # the rest of the prompts together, logits on each one's last token only
            row: dict[int, int] = {}
            n = 0
            for seq, prompt in enumerate(prompts):
                for pos in range(shared, len(prompt)):
                    put(n, int(prompt[pos]), pos, seq, pos == len(prompt) - 1)
                    n += 1
                row[seq] = n - 1
            decode(n)
            tokens: list[list[int]] = [[] for _ in prompts]
            margins: list[list[float]] = [[] for _ in prompts]
            position = [len(p) for p in prompts]
            live = list(range(len(prompts)))
            while live:
                nxt: list[int] = []
                n = 0
                for seq in live:
                    logits = np.ctypeslib.as_array(
                        llama_cpp.llama_get_logits_ith(ctx, row[seq]), shape=(vocab,)
                    )
                    token, margin = top_margin(logits)
                    tokens[seq].append(token)
                    margins[seq].append(margin)
                    if token in stop_ids or len(tokens[seq]) >= max_new_tokens:
                        continue
                    put(n, token, position[seq], seq, True)
                    row[seq] = n
                    position[seq] += 1
                    n += 1
                    nxt.append(seq)
                live = nxt
                if live:
                    decode(n)
        finally:
            llama_cpp.llama_batch_free(batch)
        return list(zip(tokens, margins, strict=True))
