"""``reports/quality/<name>.json`` (stage ``evaluate@<name>``): one variant against the merged model.

Written by ``stages/evaluate.py`` from :func:`quantbench.quality.evaluate.evaluate_variant`:
perplexity, KL divergence from the merged model (mean, median, one high percentile, max), top-1
agreement, held-out accuracy with every answer, size on disk, the evaluation's peak memory and
wall times, and (when its timing report exists) the quantize stage's times.

Version 3 gives every quality figure its confidence interval (``intervals``) and keeps, per block
of consecutive scored tokens, the sums a paired comparison of two variants needs (``blocks``;
:mod:`quantbench.quality.intervals`, :mod:`quantbench.quality.compare`). A version-2 file reads
with no intervals and no blocks: its token-level data is gone, so only ``dvc repro evaluate@<name>``
gives them. Version 2 added the served check's reference answers (none in a version-1 file).
Version 1 renamed the file's ``report_version`` to ``schema_version``; version 0 files (which
carry ``report_version: 1``) are migrated on reading.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

# Every interval's one form (defined beside the code that computes intervals).
from quantbench.precision import Figure
from quantbench.schemas.base import VERSION_KEY, Migrations, StageOutput, Strict, stamp, version
from quantbench.schemas.common import HeldoutScore
from quantbench.schemas.quantize import QuantizeTiming

_PERCENTILE_KEY = re.compile(r"^p\d+(\.\d+)?$")


class KLSummary(Strict):
    """Per-token KL(merged || variant), summarized. One extra key names the high percentile that
    ``evaluate.kl_percentile`` asked for (``p99``: its value)."""

    model_config = ConfigDict(extra="allow")

    mean: float
    median: float
    max: float

    @model_validator(mode="after")
    def _one_percentile(self) -> KLSummary:
        extra = self.model_extra or {}
        bad = [k for k in extra if not _PERCENTILE_KEY.match(k)]
        if bad or len(extra) != 1:
            raise ValueError(
                f"expected mean, median, max and one percentile key like 'p99', got extra "
                f"{sorted(extra)}"
            )
        for key, value in extra.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{key} must be a number, not {value!r}")
            extra[key] = float(value)
        return self

    @property
    def high(self) -> tuple[str, float] | None:
        """The high percentile (key like 'p99', value)."""
        for key, value in (self.model_extra or {}).items():
            return key, float(value)
        return None


class ReferenceInfo(Strict):
    path: str = Field(description="The reference (merged) model folder.")
    is_variant_source: bool = Field(
        description="Whether the variant was made from these very weights (its source hash)."
    )


class WorkerMemory(Strict):
    """Resident memory of one model's evaluation process (quantbench.quality.worker)."""

    before_load_rss_bytes: int
    after_load_rss_bytes: int
    after_score_peak_rss_bytes: int
    peak_rss_bytes: int = Field(description="High-water mark of the whole pass.")


class PassTimings(Strict):
    load_s: float
    score_s: float
    heldout_s: float


class EvalTimings(Strict):
    reference: PassTimings
    variant: PassTimings
    total_s: float


class EvalText(Strict):
    path: str
    tokens: int = Field(description="Tokens evaluated (after evaluate.max_tokens).")
    ids_sha256: str | None = Field(
        None,
        description="sha256 of the evaluated token ids (quantbench.quality.intervals."
        "token_ids_sha256): two reports compare token by token only when it is the same. "
        "None in a report older than version 3.",
    )


class TokenBlock(Strict):
    """Sums over one block of consecutive scored tokens, for the reference and the variant alike
    (they scored the same ids): what a paired block bootstrap resamples, in this report and when
    two variants are compared (quantbench.quality.compare)."""

    tokens: int = Field(ge=1, description="Scored tokens in the block.")
    reference_nll: float = Field(description="Sum of the merged model's NLL (nats).")
    variant_nll: float = Field(description="Sum of the variant's NLL (nats).")
    kl: float = Field(ge=0, description="Sum of KL(merged || variant) per token (nats).")
    top1_agreements: int = Field(ge=0, description="Tokens where the two argmaxes agree.")

    @model_validator(mode="after")
    def _agreements_fit(self) -> TokenBlock:
        if self.top1_agreements > self.tokens:
            raise ValueError(
                f"top1_agreements ({self.top1_agreements}) > tokens ({self.tokens}) in a block"
            )
        return self


class QualityIntervals(Strict):
    """Each quality figure with its confidence interval. Token figures: paired block bootstrap
    over ``blocks`` (n = blocks); None with fewer than two blocks. Held-out accuracy:
    Clopper-Pearson over the questions (n = questions); None without questions."""

    perplexity: Figure | None = Field(description="The variant's perplexity.")
    reference_perplexity: Figure | None = Field(description="The merged model's perplexity.")
    perplexity_ratio: Figure | None = Field(
        description="exp(mean NLL_variant - mean NLL_merged), resampled paired."
    )
    kl_mean: Figure | None = Field(description="Mean KL(merged || variant) per token.")
    top1_agreement: Figure | None
    heldout_accuracy: Figure | None


class QualityReport(StageOutput):
    """One variant's quality, measured the same way for every format."""

    OUTPUT: ClassVar[str] = "reports/quality/{name}.json"
    STAGE: ClassVar[str] = "evaluate@{name}"
    MIGRATIONS: ClassVar[Migrations] = {
        0: stamp(1, drop=("report_version",), nested=lambda d: _stamp_quantize(d)),
        # version 2 adds the reference answers of the served check (none in a version-1 file)
        1: stamp(2, nested=lambda d: d.setdefault("served_reference", [])),
        # version 3 adds intervals and the token blocks; a version-2 file kept neither
        2: stamp(3, nested=lambda d: _no_intervals(d)),
        # version 4 names the backend by the quality backends' registry (any registered name,
        # a plugin's included, where version 3 allowed hf and gguf only): nothing to convert
        3: stamp(4),
    }
    OMIT_WHEN_NONE = frozenset({"quantize"})

    schema_version: Literal[4] = version(4)
    name: str
    format: str
    recipe: dict[str, Any] = Field(description="The variant's recipe, from its variant.json.")
    backend: str = Field(
        description="The quality backend that read the checkpoint (quantbench.quality.backends): "
        "hf, transformers; gguf, llama.cpp; or a plugin's."
    )
    reference: ReferenceInfo
    tokens: int = Field(description="Scored tokens (every evaluated token but the first).")
    perplexity: float
    reference_perplexity: float
    perplexity_ratio: float = Field(description="perplexity / reference_perplexity.")
    kl_divergence: KLSummary
    top1_agreement: float = Field(description="Share of tokens with the reference's argmax.")
    heldout_accuracy: float
    heldout: HeldoutScore
    size_bytes: int = Field(description="The variant folder's bytes on disk.")
    weights_bytes: int | None
    bits_per_weight: float | None
    memory: WorkerMemory = Field(description="The variant's evaluation process.")
    reference_memory: WorkerMemory = Field(description="The reference's evaluation process.")
    settings: dict[str, Any] = Field(description="The evaluate: section of params as validated.")
    eval_text: EvalText
    threads: int
    timings: EvalTimings
    libraries: dict[str, str]
    quantize: QuantizeTiming | None = Field(
        None, description="The quantize stage's timing report, when there is one."
    )
    served_reference: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The variant's own greedy answers, token by token with the margin each won "
        "by (quantbench.fidelity.ReferenceAnswer): what its servers must answer where certain.",
    )

    intervals: QualityIntervals | None = Field(
        None,
        description="Every quality figure with its interval at evaluate.confidence (None in a "
        "file older than version 3).",
    )
    blocks: list[TokenBlock] = Field(
        default_factory=list,
        description="Per block of evaluate.bootstrap_block_tokens consecutive scored tokens, "
        "in text order, the sums a paired comparison needs (empty before version 3).",
    )

    @model_validator(mode="after")
    def _blocks_cover_the_tokens(self) -> QualityReport:
        # the blocks are the scored tokens cut in order: a partial list would bias every interval
        covered = sum(b.tokens for b in self.blocks)
        if self.blocks and covered != self.tokens:
            raise ValueError(f"blocks hold {covered} tokens, the report scored {self.tokens}")
        return self

    @property
    def peak_rss_bytes(self) -> int:
        return self.memory.peak_rss_bytes


def _stamp_quantize(data: dict[str, Any]) -> None:
    """A version-0 quality report holds a version-0 timing report: stamp that too."""
    timing = data.get("quantize")
    if isinstance(timing, dict) and VERSION_KEY not in timing:
        data["quantize"] = QuantizeTiming.MIGRATIONS[0](timing)


def _no_intervals(data: dict[str, Any]) -> None:
    """A version-2 report has neither intervals nor blocks (nor the ids' hash)."""
    data.setdefault("intervals", None)
    data.setdefault("blocks", [])


__all__ = [
    "EvalText",
    "EvalTimings",
    "KLSummary",
    "PassTimings",
    "QualityIntervals",
    "QualityReport",
    "ReferenceInfo",
    "TokenBlock",
    "WorkerMemory",
]
