"""FLOPs and bytes of a forward step, and its roofline time.

Counting conventions (see docs/ESTIMATE.md for the derivation):

* a matrix multiply costs 2 FLOPs per multiply-accumulate; norms, activations, rotary
  embeddings and softmax are not counted (a few FLOPs per element, far below the matmuls);
* attention per query token at context ``c`` costs ``4 * layers * heads * head_dim * c``
  (QK^T and PV) and reads the cached K and V of ``c`` positions once: all query heads of a
  KV group share that read, and the score matrix is never written to memory (fused,
  flash-style kernels), so it costs no bytes;
* a step reads every streamed weight once, however many tokens it carries; logits are
  computed for decode tokens and for the last prompt token only;
* a prompt token writes its K and V once and reads them once (the lower bound a tiled
  attention kernel reaches when a tile's keys stay on chip).

A step takes ``max(flops / effective compute, bytes / effective bandwidth)`` plus a fixed
per-step overhead. Every quantity accepts numpy arrays so a whole output can be costed at
once, which is how KV-cache growth over the output is averaged in rather than ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from quantbench.schemas.roofline import ModelShape

Number = float | NDArray[np.float64]


class Rates(BaseModel):
    """Peak and effective throughput of a device for one compute dtype."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compute_dtype: str
    peak_flops: float = Field(gt=0, description="FLOP/s")
    peak_bandwidth: float = Field(gt=0, description="bytes/s")
    compute_efficiency: float = Field(gt=0, le=1)
    bandwidth_efficiency: float = Field(gt=0, le=1)
    step_overhead_s: float = Field(ge=0, description="fixed cost per forward step")
    notes: tuple[str, ...] = ()

    @property
    def flops(self) -> float:
        """Effective FLOP/s."""
        return self.peak_flops * self.compute_efficiency

    @property
    def bandwidth(self) -> float:
        """Effective bytes/s."""
        return self.peak_bandwidth * self.bandwidth_efficiency

    @property
    def peak_ops_per_byte(self) -> float:
        """The datasheet ridge point (what llm-optimizer calls the hardware ops/byte)."""
        return self.peak_flops / self.peak_bandwidth

    @property
    def ops_per_byte(self) -> float:
        """The ridge point after efficiencies: intensity above it is compute-bound."""
        return self.flops / self.bandwidth


@dataclass(frozen=True)
class Cost:
    """FLOPs and bytes of some work; scalars or arrays of equal shape."""

    flops: Number
    bytes: Number

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.bytes + other.bytes)

    def time(self, rates: Rates) -> Number:
        """Roofline time in seconds, per-step overhead included."""
        return (
            np.maximum(self.flops / rates.flops, self.bytes / rates.bandwidth)
            + rates.step_overhead_s
        )

    def compute_bound(self, rates: Rates) -> bool | NDArray[np.bool_]:
        return self.flops / rates.flops >= self.bytes / rates.bandwidth

    def intensity(self) -> Number:
        """Arithmetic intensity, FLOPs per byte."""
        return self.flops / self.bytes


@dataclass(frozen=True)
class StepCosts:
    """Per-token and per-step costs of one model variant with one KV-cache dtype."""

    arch: ModelShape
    streamed_weight_bytes: float
    gathered_bytes_per_token: float
    kv_bytes_per_token: float

    @property
    def body_flops_per_token(self) -> float:
        return 2.0 * self.arch.body_matmul_params

    @property
    def head_flops_per_token(self) -> float:
        return 2.0 * self.arch.head_params

    def attention_flops(self, context: Number) -> Number:
        """FLOPs of one query token attending ``context`` positions in every layer."""
        a = self.arch
        return 4.0 * a.num_layers * a.num_heads * a.head_dim * context

    def weights(self) -> Cost:
        """Streaming every weight once: paid by each step, shared by its tokens."""
        return Cost(0.0, self.streamed_weight_bytes)

    def decode(self, sequences: Number, context: Number) -> Cost:
        """``sequences`` decode tokens, each attending ``context`` positions (itself included).

        Each reads its sequence's cache once and appends one entry.
        """
        per_token_flops = (
            self.body_flops_per_token + self.head_flops_per_token + self.attention_flops(context)
        )
        per_token_bytes = self.gathered_bytes_per_token + (context + 1) * self.kv_bytes_per_token
        return Cost(sequences * per_token_flops, sequences * per_token_bytes)

    def prefill(self, tokens: Number, prompt_len: int) -> Cost:
        """``tokens`` prompt tokens from prompts of ``prompt_len`` (causal attention).

        A prompt's token ``i`` attends ``i`` positions, so the mean is ``(S + 1) / 2``; the
        masked half is skipped, as fused kernels do. Logits only for each prompt's last token.
        """
        mean_context = (prompt_len + 1) / 2.0
        flops = tokens * (
            self.body_flops_per_token
            + self.attention_flops(mean_context)
            + self.head_flops_per_token / prompt_len
        )
        kv_write_and_read = 2.0 * self.kv_bytes_per_token
        return Cost(flops, tokens * (self.gathered_bytes_per_token + kv_write_and_read))

    def prompt(self, prompt_len: int) -> Cost:
        """One whole prompt processed alone: weights plus its tokens."""
        return self.weights() + self.prefill(float(prompt_len), prompt_len)
