"""How variants are measured: the `evaluate:` section of params.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from quantbench.settings import Settings


class EvaluateSettings(Settings):
    """Perplexity/KL windows, held-out generation and the statistics reported."""

    context_length: int = Field(
        512,
        ge=16,
        le=32768,
        description="Tokens per forward window over the evaluation text (llama.cpp's "
        "perplexity default is 512).",
    )
    stride: int = Field(
        256,
        ge=1,
        description="New tokens scored per window; each window re-reads context_length - stride "
        "tokens of context, so every scored token (after the first window) sees at least that "
        "much context. stride = context_length gives disjoint windows.",
    )
    max_tokens: int | None = Field(
        None,
        ge=32,
        description="Evaluate only the first N tokens of the evaluation text (null: all of it).",
    )
    kl_percentile: float = Field(
        99.0,
        gt=0,
        lt=100,
        description="High percentile of the per-token KL divergence reported beside the mean "
        "(llama.cpp reports 99%).",
    )
    heldout_max_new_tokens: int = Field(
        32, ge=1, le=1024, description="Greedy tokens generated per held-out question."
    )
    heldout_limit: int | None = Field(
        None, ge=1, description="Ask only the first N held-out questions (null: all)."
    )
    compute_dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="Activation dtype for transformers backends (bf16, GPTQ, AWQ). float32 "
        "isolates the weights' quantization error (llama.cpp computes in float32 too); "
        "bfloat16 halves the bf16 variant's memory but adds activation rounding to every delta.",
    )

    confidence: float = Field(
        0.95,
        gt=0,
        lt=1,
        description="Confidence of every quality interval (perplexity, its ratio, KL mean, "
        "top-1 agreement, held-out accuracy); 0.95 is the level the bench's intervals use, so "
        "the deployment decision weighs quality and speed at one level.",
    )
    bootstrap_block_tokens: int = Field(
        32,
        ge=1,
        description="Consecutive scored tokens resampled together by the block bootstrap. "
        "Neighbouring tokens' NLL and KL are correlated (a rare name split into pieces is hard "
        "for several tokens in a row), and resampling single tokens would take them as "
        "independent and give too narrow an interval; 32 is several times that reach and still "
        "leaves about 300 blocks on the 9,835 scored tokens of data/eval.txt. 1 resamples "
        "tokens independently.",
    )

    @model_validator(mode="after")
    def _stride_fits(self) -> EvaluateSettings:
        if self.stride > self.context_length:
            raise ValueError(
                f"stride ({self.stride}) must be <= context_length ({self.context_length})"
            )
        return self


class ServedTaskSettings(Settings):
    """The `served_task:` section: the fine-tune's task scored through each bench pair's server
    by lm-evaluation-harness (quality/served_task.py), against the evaluate stage's answers."""

    enabled: bool = Field(
        True,
        description="Score the held-out task through every bench pair's server (the first "
        "server point's, no second start); the questions, answer length and confidence are the "
        "evaluate stage's (data.heldout, evaluate.heldout_max_new_tokens, heldout_limit, "
        "confidence), so served and offline answers pair up question by question.",
    )
    concurrency: int = Field(
        16,
        ge=1,
        le=256,
        description="Questions in flight at once: 16, as the offline run answers them (16 a "
        "batch). A deployment answers several at once, and a batching engine answers 16 in about "
        "the time of 4 (vLLM on 2 cores: a decode step of 54 ms + 0.6 ms a sequence; the 253 "
        "questions took 68 s at 4); an engine with fewer slots queues the rest (llama-server's "
        "4). Batch composition can move a greedy answer where kernels are not batch-invariant "
        "(vLLM's), which is the deployment's behaviour too; 1 asks each question as if alone.",
    )
    standard_tasks: list[str] = Field(
        default_factory=list,
        description="Standard lm-eval tasks to score too (e.g. hellaswag, gsm8k), their data "
        "on disk (the run reaches no hub): the validate stage refuses a task it cannot load.",
    )
    timeout_s: float = Field(
        300.0, gt=0, description="One answer's time limit (lm-eval's request timeout)."
    )
