"""Run a variant on token ids: transformers for bf16/GPTQ/AWQ folders, llama.cpp for GGUF.

The backends are a registry (:func:`register_backend`, :func:`get_backend`): a format names the
one that reads its checkpoints (``Format.quality_backend``), and a plugin may add its own.

Both backends take token ids, never text, so every variant is measured on the same sequence,
and both give full-vocabulary logits per position and greedy continuations. Heavy imports happen
inside the loaders: a GGUF evaluation process never imports torch, so its memory is llama.cpp's.

Both compute where ``runtime.device`` says (``device``: "cpu" | "cuda", resolved by the stage):
transformers with the model and its inputs on the GPU (logits come back to the host as float32
arrays), llama.cpp with every layer offloaded to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from quantbench.accelerator import torch_device
from quantbench.accelerator.nvidia import Device
from quantbench.errors import UserError
from quantbench.fidelity import top_margin
from quantbench.formats.registry import get_format
from quantbench.native import llama_build
from quantbench.quality.gguf_batch import BatchDecoder
from quantbench.quality.prefix import common_prefix


class Backend(Protocol):
    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """(len(ids), vocab) float32 next-token logits for every position (may be a view that
        the next call overwrites)."""
        ...

    def generate(self, ids: Sequence[int], max_new_tokens: int, stop_ids: set[int]) -> list[int]:
        """Greedy continuation of `ids` (stop token included when hit)."""
        ...

    def generate_scored(
        self, ids: Sequence[int], max_new_tokens: int, stop_ids: set[int]
    ) -> tuple[list[int], list[float]]:
        """Greedy continuation and, per token, the logit margin it won by (top-1 - top-2)."""
        ...

    def generate_scored_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: set[int]
    ) -> list[tuple[list[int], list[float]]]:
        """:meth:`generate_scored` for each prompt, as many at once as the backend can."""
        ...


class HFBackend:
    """A transformers causal LM: bf16 folders, AWQ (compressed-tensors) and GPTQ (gptqmodel)."""

    def __init__(self, model: Any, device: str = "cpu") -> None:
        self.model = model
        self.device = device  # a torch device string: where the model's inputs go

    @classmethod
    def load(
        cls, model_dir: Path, fmt: str, compute_dtype: str, device: Device = "cpu"
    ) -> HFBackend:
        import torch

        # the format knows how its checkpoint loads (GPTQ through GPTQModel, the rest plainly),
        # on the CPU (Format.load_hf_model takes no device); on a GPU it then moves there whole
        model = get_format(fmt).load_hf_model(model_dir, getattr(torch, compute_dtype))
        if device != "cpu":
            model = model.to(torch_device(device))
        model.eval()
        return cls(model, torch_device(device))

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            ids_in = torch.tensor([list(ids)], device=self.device)
            out = self.model(input_ids=ids_in, use_cache=False)
        return out.logits[0].float().cpu().numpy()

    def generate(self, ids: Sequence[int], max_new_tokens: int, stop_ids: set[int]) -> list[int]:
        return self.generate_scored(ids, max_new_tokens, stop_ids)[0]

    def generate_scored(
        self, ids: Sequence[int], max_new_tokens: int, stop_ids: set[int]
    ) -> tuple[list[int], list[float]]:
        return self.generate_scored_batch([ids], max_new_tokens, stop_ids)[0]

    def generate_scored_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: set[int]
    ) -> list[tuple[list[int], list[float]]]:
        """:meth:`generate_scored` for several prompts in one forward pass per step.

        The same argmax loop as the GGUF backend (not model.generate, whose defaults come from
        each folder's generation_config), so "greedy" means one thing for every variant.
        Left-padded with an attention mask and explicit positions (a plain forward numbers
        positions by cache slot, padding included), so each row is its prompt alone but for the
        order of floating-point sums in wider matrix products: a row's argmax can differ from its
        single-prompt one only where its top two logits tie to rounding (tests/quality checks the
        embedded model's answers equal). Rows that hit a stop token stop growing; the loop ends
        when all have.

        The prompts' common prefix (:mod:`quantbench.quality.prefix`) is run once and its KV
        cache repeated for every row, the padding placed after it."""
        import torch

        if not prompts:
            return []
        shared = common_prefix(prompts)
        rest = [list(p[shared:]) for p in prompts]
        width = max(len(p) for p in rest)
        pad = next(iter(stop_ids), 0)  # any id: padded slots are masked out
        on = self.device
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in rest], device=on)
        mask = torch.tensor(
            [[1] * shared + [0] * (width - len(p)) + [1] * len(p) for p in rest], device=on
        )
        positions = (mask[:, shared:].cumsum(-1) - 1).clamp(min=0) + shared
        out: list[list[int]] = [[] for _ in prompts]
        margins: list[list[float]] = [[] for _ in prompts]
        live = [True] * len(prompts)
        with torch.inference_mode():
            past = None
            if shared:
                head = torch.tensor([list(prompts[0][:shared])], device=on)
                past = self.model(input_ids=head, use_cache=True, logits_to_keep=1).past_key_values
                past.batch_repeat_interleave(len(prompts))  # one copy of the prefix a row
            # last position only: a batch's every-position logits were 220 MB on the embedded
            # model (16 x 70 x 49k floats), which the variant's peak-memory figure would carry
            step = self.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                past_key_values=past, logits_to_keep=1,
            )  # fmt: skip
            for _ in range(max_new_tokens):
                rows = step.logits[:, -1].float().cpu().numpy()
                tokens = []
                for i, row in enumerate(rows):
                    token, margin = top_margin(row)
                    tokens.append(token)
                    if live[i]:
                        out[i].append(token)
                        margins[i].append(margin)
                        live[i] = token not in stop_ids
                if not any(live):
                    break
                column = torch.ones((len(prompts), 1), dtype=mask.dtype, device=on)
                mask = torch.cat([mask, column], dim=1)
                positions = positions[:, -1:] + 1
                step = self.model(
                    input_ids=torch.tensor(tokens, device=on).unsqueeze(1),
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=step.past_key_values,
                    use_cache=True,
                )
        return list(zip(out, margins, strict=True))


class GGUFBackend:
    """A GGUF file through llama.cpp (the pinned bindings), fed token ids directly."""

    def __init__(self, llm: Any, threads: int = 1) -> None:
        self.llm = llm
        self._batch = BatchDecoder(llm, threads)

    @classmethod
    def load(cls, gguf_path: Path, n_ctx: int, threads: int, device: Device = "cpu") -> GGUFBackend:
        llama_cpp = llama_build.load_binding()
        llm = llama_cpp.Llama(
            model_path=str(gguf_path),
            n_ctx=n_ctx,
            n_batch=n_ctx,
            n_ubatch=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_gpu_layers=gpu_layers(device),
            logits_all=True,  # logits for every position, as perplexity needs
            verbose=False,
        )
        return cls(llm, threads)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        self.llm.reset()
        self.llm.eval(list(ids))
        return self.llm.scores[: len(ids)]  # a view of the bindings' buffer, no copy

    def generate(self, ids: Sequence[int], max_new_tokens: int, stop_ids: set[int]) -> list[int]:
        return self.generate_scored(ids, max_new_tokens, stop_ids)[0]

    def generate_scored(
        self, ids: Sequence[int], max_new_tokens: int, stop_ids: set[int]
    ) -> tuple[list[int], list[float]]:
        # A plain argmax loop rather than llama.cpp's sampler chain, so "greedy" means the same
        # thing as in transformers (no repetition penalty, no top-k/top-p defaults).
        self.llm.reset()
        self.llm.eval(list(ids))
        out: list[int] = []
        margins: list[float] = []
        for _ in range(max_new_tokens):
            token, margin = top_margin(self.llm.scores[self.llm.n_tokens - 1])
            out.append(token)
            margins.append(margin)
            if token in stop_ids:
                break
            self.llm.eval([token])
        return out, margins

    def generate_scored_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: set[int]
    ) -> list[tuple[list[int], list[float]]]:
        # the bindings' Llama holds one sequence; a second context decodes the batch's together
        return self._batch.answer(prompts, max_new_tokens, stop_ids)


def gpu_layers(device: Device) -> int:
    """llama.cpp's ``n_gpu_layers``: every layer on a GPU (-1), none on the CPU (the bindings'
    default). The batch decoder's second context shares the weights where they are."""
    return -1 if device == "cuda" else 0


@dataclass(frozen=True)
class BackendKind:
    """One way the quality harness runs a checkpoint, as a format names it
    (``Format.quality_backend``): how it loads, and whether it reads the variant's weights file
    (a GGUF) or its folder. A plugin registers its own with :func:`register_backend`."""

    name: str
    description: str
    load: Callable[..., Backend]
    """(path, format, compute dtype, context tokens, threads) -> a loaded backend; a kind whose
    ``on_device`` is set also takes ``device=`` ("cpu" | "cuda": runtime.device resolved)."""
    on_device: bool = False
    """Whether it computes where runtime.device says (its ``load`` then takes ``device=``). A
    kind that does not say (a plugin's written before devices) is loaded as it always was."""
    reads_file: bool = False
    """The variant's weights file (a GGUF) rather than its folder."""
    torch_threads: bool = False
    """Whether torch's thread pools must be set to ``threads`` first (transformers)."""
    answer_batch: int = 16
    """Held-out questions answered per ``generate_scored_batch`` call: the width that answered
    fastest on 2 cores (quality/worker.py; docs/QUALITY.md)."""


_BACKENDS: dict[str, BackendKind] = {}


def register_backend(kind: BackendKind) -> BackendKind:
    _BACKENDS[kind.name] = kind
    return kind


def get_backend(name: str) -> BackendKind:
    if name not in _BACKENDS:
        raise UserError(
            f"unknown quality backend {name!r} (a format's quality_backend); known: "
            f"{', '.join(_BACKENDS)}"
        )
    return _BACKENDS[name]


def backend_names() -> list[str]:
    return list(_BACKENDS)


register_backend(
    BackendKind(
        "hf",
        "transformers: the checkpoint's folder, loaded the way its format says",
        lambda path, fmt, dtype, n_ctx, threads, device="cpu": HFBackend.load(
            path, fmt, dtype, device
        ),
        on_device=True,
        torch_threads=True,
        # 128 questions: 23.6 s at 16, 19.5 at 32, 16.0 at 64, 15.6 at 128 (bf16; W8A8 33 -> 21
        # s at 64); a batch's KV cache at 64 is about 260 MB of float32 in the pass's peak
        answer_batch=64,
    )
)
register_backend(
    BackendKind(
        "gguf",
        "llama.cpp (the pinned bindings): the variant's .gguf file",
        lambda path, fmt, dtype, n_ctx, threads, device="cpu": GGUFBackend.load(
            path, n_ctx, threads, device
        ),
        on_device=True,
        reads_file=True,
        # 128 questions: 19.9 s at 16, 20.4 at 32, 25.9 at 64 (one KV pool: attention grows)
        answer_batch=16,
    )
)
