"""The quality gate: the quality a user will accept, and which variants are shown to meet it.

The user states limits against the merged model (params ``report.quality``): by default what
tracks fidelity to the fine-tune, a mean KL divergence of at most 0.15 nats, a top-1 agreement of
at least 0.80 and at most 5 points of the fine-tune's held-out task lost; a perplexity ratio may
be limited too, but is reported, not gated, by default (docs/QUANTIZE.md says why). A variant is ranked only when its quality is
SHOWN within every limit: the end of its interval on the wrong side lies within it (the upper
end for a ratio, a divergence or a loss; the lower end for an agreement). A variant whose
interval straddles a limit is excluded too, with the words "not shown within": being possibly
acceptable is not being acceptable. A figure measured without an interval (a report of an
older version) is judged on its value, and the reason says so.

The evaluate stage runs before any bench stage, so a bench stage already knows whether its
variant can be ranked (:func:`shown_unrankable`): one that cannot is measured at its precision
floor (``bench.quality_gated``), the time going to the pairs that can win.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from quantbench.precision import Figure
from quantbench.quality.compare import compare_heldout

if TYPE_CHECKING:
    from quantbench.schemas.quality import QualityReport

GateMetric = Literal["perplexity_ratio", "kl_mean", "heldout_accuracy_loss", "top1_agreement"]


@dataclass(frozen=True)
class Limit:
    op: Literal["<=", ">="]
    words: str
    fmt: str


LIMITS: dict[str, Limit] = {
    "perplexity_ratio": Limit("<=", "perplexity ratio to the merged model", "{:.3f}"),
    "kl_mean": Limit("<=", "mean KL divergence from the merged model", "{:.4f}"),
    "heldout_accuracy_loss": Limit(
        "<=", "held-out accuracy lost against the merged model", "{:.1%}"
    ),
    "top1_agreement": Limit(">=", "top-1 agreement with the merged model", "{:.1%}"),
}


def _shown(fig: Figure) -> str:
    if fig.low == fig.high == fig.value:
        return f"{fig.value:.4g} (no interval: judged on its value)"
    return f"{fig.value:.4g} [{fig.low:.4g}, {fig.high:.4g}]"


def gate(figures: Mapping[str, Figure | None], limits: Mapping[str, float]) -> list[str]:
    """Why a variant may not be ranked, one reason per limit it is not shown to meet ([] when
    it meets them all). ``figures``: the variant's quality figures by the names of
    :data:`LIMITS`."""
    reasons = []
    for name, limit in limits.items():
        spec = LIMITS[name]
        fig = figures.get(name)
        bound = spec.fmt.format(limit)
        if fig is None:
            reasons.append(f"no {spec.words} measured (report.quality.{name} is {bound})")
            continue
        worst = fig.high if spec.op == "<=" else fig.low
        best = fig.low if spec.op == "<=" else fig.high
        inside = worst <= limit if spec.op == "<=" else worst >= limit
        if inside:
            continue
        could = best <= limit if spec.op == "<=" else best >= limit
        reasons.append(
            f"{spec.words} {_shown(fig)} "
            + ("not shown within" if could else "beyond")
            + f" report.quality.{name} {spec.op} {bound}"
        )
    return reasons


def check_limits(limits: Mapping[str, float]) -> dict[str, float]:
    """``report.quality`` validated: known figures, limits that can be shown."""
    for name, limit in limits.items():
        if name not in LIMITS:
            raise ValueError(f"report.quality: unknown figure {name!r}; known: {', '.join(LIMITS)}")
        if name == "perplexity_ratio" and not limit >= 1:
            raise ValueError(
                f"report.quality.perplexity_ratio {limit}: a ratio to the merged model below "
                "1 can never be shown (the bf16 copy itself is 1.0); give e.g. 1.10"
            )
        if name in ("kl_mean", "heldout_accuracy_loss") and not limit >= 0:
            raise ValueError(f"report.quality.{name} {limit}: give a limit >= 0")
        if name == "top1_agreement" and not 0 < limit <= 1:
            raise ValueError(f"report.quality.top1_agreement {limit}: give a share in (0, 1]")
    return dict(limits)


def quality_figures(
    report: QualityReport | None, reference: QualityReport | None = None
) -> dict[str, Figure | None]:
    """A variant's quality figures by the quality gate's names, each with its interval where
    the report has one (a value alone otherwise; held-out accuracy lost against ``reference``,
    the merged weights' own report, paired where both kept their answers)."""
    if report is None:
        return {}
    ivs = report.intervals

    def value(v: float | None) -> Figure | None:
        if v is None:
            return None
        return Figure(value=v, low=v, high=v, confidence=0.95, n=1, method="value")

    out: dict[str, Figure | None] = {
        "perplexity_ratio": (ivs.perplexity_ratio if ivs else None)
        or value(report.perplexity_ratio),
        "kl_mean": (ivs.kl_mean if ivs else None) or value(report.kl_divergence.mean),
        "top1_agreement": (ivs.top1_agreement if ivs else None) or value(report.top1_agreement),
    }
    out["heldout_accuracy_loss"] = heldout_loss(report, reference)
    return out


def exp_figure(fig: Figure | None) -> Figure | None:
    """e to a figure and its interval (a KL divergence in nats as the ratio it is the log of)."""
    if fig is None:
        return None
    return fig.model_copy(
        update={"value": math.exp(fig.value), "low": math.exp(fig.low), "high": math.exp(fig.high)}
    )


def fidelity_figure(report: QualityReport | None) -> Figure | None:
    """What the quality tie-break compares: e^KL, the mean KL divergence from the merged model
    (nats) as a ratio (1 for the merged weights; a contrast of two is e^(KL_a - KL_b), the ratio
    of how much less likely each variant finds the merged model's own next tokens). KL, not
    perplexity: perplexity on the evaluation text moves with how far a copy drifts back towards
    the base model, not with how faithful it is to the fine-tune (docs/QUANTIZE.md)."""
    return exp_figure(quality_figures(report).get("kl_mean")) if report is not None else None


def heldout_loss(report: QualityReport, reference: QualityReport | None) -> Figure | None:
    """Held-out accuracy the variant lost against the merged weights (reference - variant)."""
    if reference is None or report.heldout_accuracy is None or reference.heldout_accuracy is None:
        return None
    if reference.name == report.name:
        return Figure(value=0.0, low=0.0, high=0.0, confidence=0.95, n=report.heldout.total,
                      method="the merged weights themselves")  # fmt: skip
    try:
        diff = compare_heldout(reference, report)
        return diff.difference
    except (ImportError, ValueError):
        loss = reference.heldout_accuracy - report.heldout_accuracy
        return Figure(value=loss, low=loss, high=loss, confidence=0.95,
                      n=report.heldout.total, method="value")  # fmt: skip


def quality_gate(
    report: QualityReport | None,
    limits: Mapping[str, float],
    reference: QualityReport | None = None,
) -> str | None:
    """Why a variant may not be ranked (``limits`` not shown met), or None."""
    if not limits:
        return None
    if report is None:
        return "not evaluated (report.quality is set)"
    return "; ".join(gate(quality_figures(report, reference), limits)) or None


def shown_unrankable(report: QualityReport | None, limits: Mapping[str, float]) -> str | None:
    """Why the decision can never rank this variant, judged from its own quality report alone
    (None: it may be ranked, or that cannot be told yet).

    The limits whose figure the report has decide; one that needs another report (held-out
    accuracy lost against the merged weights) or a figure the report lacks is left to the
    decision: a variant is screened out only on what is shown, never on what is missing."""
    if report is None or not limits:
        return None
    figures = quality_figures(report)
    known = {k: v for k, v in limits.items() if figures.get(k) is not None}
    return "; ".join(gate(figures, known)) or None
