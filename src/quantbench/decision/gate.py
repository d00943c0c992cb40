"""The quality gate: the quality a user will accept, and which variants are shown to meet it.

The user states limits against the merged model (params ``report.quality``): e.g. a perplexity
ratio of at most 1.10, a mean KL divergence of at most 0.05, at most 5 points of held-out
accuracy lost, a top-1 agreement of at least 0.9. A variant is ranked only when its quality is
SHOWN within every limit: the end of its interval on the wrong side lies within it (the upper
end for a ratio, a divergence or a loss; the lower end for an agreement). A variant whose
interval straddles a limit is excluded too, with the words "not shown within": being possibly
acceptable is not being acceptable. A figure measured without an interval (a report of an
older version) is judged on its value, and the reason says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from quantbench.precision import Figure

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
