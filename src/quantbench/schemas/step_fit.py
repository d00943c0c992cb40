"""A served pair's probe and what it cost, as the pair's calibration file holds them
(``schemas.machine``): each probe request as measured, and the step costs fitted to them.

The fit itself is the estimator's (:mod:`quantbench.estimate.step_fit`); the models are here,
below both the schemas that store them and the estimator that makes and reads them.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class ProbeRequest(BaseModel):
    """One request of a probe, as the harness measured it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(ge=1, description="requests sent together (1: alone)")
    prompt_tokens: int = Field(ge=1, description="the server's count, chat template included")
    cached_tokens: int = Field(0, ge=0, description="of them, served by the prefix cache")
    shared_prefix: int | None = Field(
        None,
        ge=1,
        description="a repeat: prompt tokens it shares with an earlier request "
        "(that request's prompt but its last few template tokens)",
    )
    output_tokens: int = Field(ge=2)
    ttft_ms: float = Field(gt=0)
    tpot_ms: float = Field(gt=0)

    @property
    def prefilled(self) -> int:
        """Prompt tokens the engine computed (those its prefix cache did not serve)."""
        return max(self.prompt_tokens - self.cached_tokens, 0)

    @property
    def mean_context(self) -> float:
        """Positions a decode step attends on average over this request's output."""
        return self.prompt_tokens + self.output_tokens / 2.0


class StepFit(BaseModel):
    """What a served pair's requests and steps cost on this machine (see the module)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_ms: float = Field(ge=0, description="TTFT of a request alone, beside its tokens")
    prefill_ms_per_token: float = Field(ge=0, description="each prompt token a step carries")
    shared_step_ms: float = Field(ge=0, description="a decode step, whatever it carries")
    own_step_ms: float = Field(ge=0, description="each running sequence, at reference_context")
    context_ms_per_token: float = Field(
        ge=0, description="each sequence, per position of context beyond reference_context"
    )
    reference_context: float = Field(gt=0)
    batch_measured: int = Field(ge=1, description="most requests measured running together")
    batched_step_ms: dict[str, float] = Field(
        default_factory=dict,
        description="a decode step at reference_context by sequences running together, as "
        "measured (1 from the requests alone): between them a step is interpolated, beyond "
        "them extended by shared + k * own",
    )
    cached_prompt_tokens: float = Field(
        0.0,
        ge=0,
        description="prompt tokens the prefix cache served on a prompt of its own: "
        "the chat template's head every request shares",
    )
    cache_block: int = Field(
        1,
        ge=1,
        description="the prefix cache's granularity as a repeat showed it: it serves whole "
        "blocks of this many tokens of a shared prefix (1: every token; vLLM on a CPU caches "
        "blocks of 128)",
    )
    notes: list[str] = Field(default_factory=list)

    def decode_ms(self, running: float, context: float | np.ndarray) -> float | np.ndarray:
        """One decode step of ``running`` sequences at ``context`` positions each: the measured
        steps interpolated (a CPU's batched kernels are far from linear in the batch: llama.cpp's
        step at 3 sequences costs what it costs at 4), extended linearly beyond the largest
        batch measured, plus each sequence's context beyond the reference."""
        at_reference = self.step_at_reference(running)
        extra = self.context_ms_per_token * (context - self.reference_context)
        return at_reference + running * np.maximum(extra, -self.own_step_ms)

    def step_at_reference(self, running: float) -> float:
        """A step of ``running`` sequences at ``reference_context``."""
        measured = sorted((int(k), v) for k, v in self.batched_step_ms.items())
        if not measured:
            return self.shared_step_ms + running * self.own_step_ms
        top, at_top = measured[-1]
        if running >= top:
            return at_top + (running - top) * self.own_step_ms
        return float(np.interp(running, [k for k, _ in measured], [v for _, v in measured]))

    def prefill_ms(self, tokens: float) -> float:
        """Prompt tokens carried by steps: what they add to the steps that carry them."""
        return tokens * self.prefill_ms_per_token

    def describe(self) -> str:
        return (
            f"request {self.request_ms:.1f} ms + {self.prefill_ms_per_token:.3f} ms per prompt "
            f"token; decode step {self.shared_step_ms:.2f} ms + {self.own_step_ms:.2f} ms per "
            f"sequence at {self.reference_context:.0f} positions "
            f"(+{self.context_ms_per_token * 1e3:.1f} us per position), "
            f"batch measured to {self.batch_measured}"
        )
