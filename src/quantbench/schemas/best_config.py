"""``reports/best_config.json`` (stage ``report``): per workload (and per extra SLO profile,
``<workload>:<profile>``), the configuration to deploy, each entry versioned on its own.

The file maps each key to a :class:`Recommended` (``status`` ``"decided"`` or
``"provisional"``: the winning variant and engine, its settings, the exact command the bench
started and the deployable one, the load it was measured at, every headline figure with its
interval, the sample, each SLO constraint's verdict, memory, the quality given up, the decision,
its ties and, when provisional, every row still open) or a :class:`NoneFound` (``status:
"none"``: why, and each pair's nearest miss). Written by :mod:`quantbench.report.best_config`;
read by ``quantbench gather`` (:func:`read_entry`) and by people deploying.

Before the schema an entry carried ``format_version`` 3 and no ``schema_version`` (it reads as
version 0): its ties named their figure by the ranking metric's own key, and an undecided
profile's decision was ``{}``; the migration to version 1 rewrites both. Version 1 said
``status: "ok"`` for every recommendation, provisional or not; version 2 says which
(from the decision's own status), with the ``headline`` and the rows ``unsettled``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas import metrics
from quantbench.schemas.base import Migrations, StageOutput, Strict, version
from quantbench.schemas.bench import CacheSummary, LoadSummary, TaskAgreement

CURRENT = 2

STATUS = (
    "decided: the winner was separated beyond noise from every other rankable row, or shown "
    "equivalent to them within report.equivalence and chosen by a tie-break (decision.status "
    "'separable' or 'tie-break'); provisional: some rows are still not yet separable from the "
    "leader, or kept out of the ranking only by an undecided SLO verdict and not shown slower "
    "(decision.status 'not separable'): the winner is the best guess the measurements allow, "
    "`unsettled` names each open row and what more measurement would settle it; none (a "
    "NoneFound entry): no configuration may be recommended."
)


class Estimate(Strict):
    """A headline figure: its value, and its interval where the sample bounds it (an infinite
    bound is written null), or ``too_few`` where it cannot."""

    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset(
        {"low", "high", "confidence", "n", "method", "too_few", "note"}
    )

    value: float | None
    low: float | None = None
    high: float | None = None
    confidence: float | None = None
    n: int | None = None
    method: str | None = None
    too_few: bool | None = Field(None, description="true: the sample cannot bound it")
    note: str | None = None


class Comparison(Strict):
    """One rankable row against the leader: the ratio of their ranking figures and its interval."""

    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset(
        {"ratio", "low", "high", "confidence", "how"}
    )

    key: str
    verdict: str
    source: str
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float | None = None
    how: str | None = None


class Decision(Strict):
    """How the decision was made (docs/BENCH.md, "How the decision is made")."""

    status: str
    rule: str
    leader: str | None
    contenders: list[str]
    comparisons: list[Comparison]
    tradeoffs: list[str]
    stability: dict[str, float] = Field(description="share of resamples each configuration wins")
    resamples: int
    equivalence: float | None
    drift: float | None


class Unsettled(Strict):
    """A row a provisional decision could not yet tell from the winner."""

    key: str
    label: str
    why: Literal["not yet separable", "SLO undecided"] = Field(
        description="not yet separable: its ratio's interval to the leader holds 1 and leaves "
        "the equivalence margin; SLO undecided: kept out of the ranking only by an undecided "
        "SLO verdict, not shown slower than the leader"
    )
    differs: list[str] = Field(
        description="what it has other than the winner: variant, engine, server setting, load "
        "(another pair's setting and load are not listed)"
    )
    comparison: str = Field(description="its ranked figure over the leader's, with the interval")
    to_settle: str = Field(description="what more measurement would settle it")


class Tie(Strict):
    """A configuration the winner is tied with on the ranking figure."""

    pair: str
    variant: str
    engine: str
    server_point: str
    load_point: str
    key: str
    metric: str = Field(description="the ranking figure (the decision's ranked_by)")
    figure: Estimate
    perplexity_ratio: float | None
    peak_rss_bytes: int | None = Field(
        description="the server's memory: its GPU memory plus its host resident set (the "
        "resident set alone on a CPU machine), as the memory tie-break compares it"
    )
    e2e_p99_ms: float | None


class Deploy(Strict):
    """The winning server as a deployment starts it, from the project's root."""

    argv: list[str]
    model_name: str | None
    env: dict[str, str]
    secret_env: list[str] = Field(description="variables to export yourself (never recorded)")
    cwd: str
    placeholders: dict[str, str | int]
    command_line: str
    left_out: list[str] = Field(description="the harness's own flags, not a deployment's")
    engine: str
    engine_version: str


class MeasuredAt(Strict):
    workload: str
    load_point: str
    shape: dict[str, Any] | None


class Expected(Strict):
    """Every headline figure of the winning row, and its cost."""

    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({*metrics.HEADLINE, "rerun"})

    output_throughput: Estimate | None = None
    good_output_throughput: Estimate | None = None
    goodput: Estimate | None = None
    request_throughput: Estimate | None = None
    ttft_p50_ms: Estimate | None = None
    ttft_p90_ms: Estimate | None = None
    ttft_p99_ms: Estimate | None = None
    tpot_p50_ms: Estimate | None = None
    tpot_p90_ms: Estimate | None = None
    tpot_p99_ms: Estimate | None = None
    itl_p50_ms: Estimate | None = None
    itl_p99_ms: Estimate | None = None
    e2e_p50_ms: Estimate | None = None
    e2e_p99_ms: Estimate | None = None
    error_rate: Estimate | None = None
    rerun: Estimate | None = Field(
        None,
        description="The ranked figure as a rerun of this point will measure it: a prediction "
        "interval with the run-to-run drift, taken from the winner's confirming rounds where it "
        "has two or more, else from its row widened for having been chosen among the "
        "contenders (quantbench.decision.expected). The figures above are what this run "
        "measured; this is what to expect.",
    )
    cost_per_million_tokens: float | None
    currency: str
    price_per_hour: float | None


class Sample(Strict):
    repeats: int
    requests: int
    completed: int
    failed: int
    incomplete: int
    unsent: int
    not_served: int


class Checks(Strict):
    lengths_ok: bool | None
    harness_ok: bool | None
    served_check: str | None
    cache: CacheSummary | None


class ServedScore(Strict):
    """One task's accuracy through the chosen pair's server (its answers stay in the bench's
    summary)."""

    task: str
    metric: str
    correct: int | None
    total: int
    accuracy: float
    interval: tuple[float, float] | None


class ServedTaskBrief(Strict):
    verdict: str
    server_point: str | None
    harness: str
    scores: list[ServedScore]
    against_offline: TaskAgreement | None
    note: str


class Memory(Strict):
    peak_rss_bytes: int | None
    peak_gpu_bytes: int | None
    ready_seconds: float | None
    size_on_disk_bytes: int | None


class SloVerdict(Strict):
    """One SLO constraint judged on the row (``constraint`` None: only its reason is known, as
    a row judged before the verdicts were kept says)."""

    constraint: str | None = None
    metric: str | None = None
    statistic: str | None = None
    op: str | None = None
    threshold: float | None = None
    value: float | None = None
    low: float | None = None
    high: float | None = None
    verdict: Literal["pass", "fail", "undecided"] | None = None
    passed: bool | None = None
    reason: str


class KlHigh(Strict):
    statistic: str
    value: float | None


class Quality(Strict):
    """What the variant gives up against the merged model (``evaluated`` false: nothing else)."""

    evaluated: bool
    perplexity: float | None = None
    reference_perplexity: float | None = None
    perplexity_ratio: float | None = None
    perplexity_delta: float | None = None
    kl_divergence_mean: float | None = None
    kl_divergence_high: KlHigh | None = None
    top1_agreement: float | None = None
    heldout_accuracy: float | None = None
    reference_heldout_accuracy: float | None = None
    reference_heldout_source: str | None = None
    heldout_delta: float | None = None
    summary: str | None = None


def _from_format_3(data: dict[str, Any]) -> dict[str, Any]:
    """format_version 3 (version 0) -> 1: the version key, a tie's figure under ``figure`` (it was under
    the ranking metric's own name), an undecided profile's decision null (it was {})."""
    out = {k: v for k, v in data.items() if k != "format_version"}
    out["schema_version"] = 1
    if out.get("decision") == {}:
        out["decision"] = None
    metric = out.get("ranked_by")
    ties = []
    for tie in out.get("ties") or []:
        tie = dict(tie)
        tie["metric"] = metric
        tie["figure"] = tie.pop(metric, {"value": None})
        ties.append(tie)
    if "ties" in out:
        out["ties"] = ties
    return out


def _from_1(data: dict[str, Any]) -> dict[str, Any]:
    """1 -> 2: a recommendation's ``status`` from its decision's (``ok`` said nothing of it), its
    headline rebuilt from its fields, the open rows from the decision's contenders and
    comparisons (a contender compared "not yet separable" is one; any other is one whose SLO
    verdict was undecided). A ``none`` entry only changes its version."""
    out = {**data, "schema_version": 2}
    if out.get("status") == "none":
        return out
    decision = out.get("decision") or {}
    provisional = decision.get("status") == "not separable"
    out["status"] = "provisional" if provisional else "decided"
    verdicts = {c["key"]: c for c in decision.get("comparisons") or []}
    load = (out.get("measured_at") or {}).get("load_point")
    winner = f"{out.get('pair')}/{out.get('server_point')}/{out.get('workload')}/{load}"
    unsettled = []
    for key in decision.get("contenders") or []:
        if key == winner:
            continue
        c = verdicts.get(key)
        apart = c is not None and c.get("verdict") == "not yet separable"
        ratio = (
            f"{c['ratio']:.3f}x [{c['low']:.3f}, {c['high']:.3f}]"
            if c is not None and c.get("ratio") is not None
            else ""
        )
        parts = key.split("/")
        label = " · ".join([parts[0], parts[1], parts[3]] if len(parts) == 4 else parts)
        unsettled.append(
            {"key": key, "label": label,
             "why": "not yet separable" if apart else "SLO undecided", "differs": [],
             "comparison": ratio, "to_settle": ""}
        )  # fmt: skip
    # version 1 had neither: a field of that name is kept (it can only have come from here)
    out.setdefault("unsettled", unsettled if provisional else [])
    setting = out.get("server_point")
    setting = "default settings" if setting == "default" else setting
    what = f"{out.get('variant')} on {out.get('engine')} ({setting}; measured at load {load})"
    out.setdefault(
        "headline",
        f"Provisional: deploy {what}. Unsettled: "
        + "; ".join(f"{u['label']} ({u['why']})" for u in out["unsettled"])
        + "."
        if provisional
        else f"Deploy {what}.",
    )
    return out


class _Entry(StageOutput):
    """What every entry of the file says: which workload and profile, judged by which SLO and
    ranked by which figure, and the variants the quality gates exclude."""

    OUTPUT: ClassVar[str] = "reports/best_config.json"
    STAGE: ClassVar[str] = "report"
    MIGRATIONS: ClassVar[Migrations] = {0: _from_format_3, 1: _from_1}

    schema_version: Literal[2] = version(CURRENT)
    workload: str
    profile: str
    slo: str | None
    ranked_by: str
    not_recommended_for_quality: dict[str, str] = Field(
        description="variants the quality gates exclude, and why"
    )


class Recommended(_Entry):
    """The configuration to deploy for one workload (or profile)."""

    status: Literal["decided", "provisional"] = Field(description=STATUS)
    headline: str = Field(
        description="the recommendation's first line, as summary.md's bold line says it: a "
        "provisional one starts 'Provisional:' and names what is unsettled"
    )
    unsettled: list[Unsettled] = Field(
        description="provisional: every row still open, and what would settle it; decided: []"
    )
    decided_by: str
    decision: Decision | None
    ties: list[Tie]
    pair: str
    variant: str
    format: str
    recipe: dict[str, Any] | None = Field(description="the variant's recipe (variant.json)")
    engine: str
    engine_version: str
    server_point: str
    settings: dict[str, Any] = Field(description="the engine settings its sweep point changed")
    command: list[str] = Field(description="the command the bench started (secrets redacted)")
    command_line: str
    env: dict[str, str]
    deploy: Deploy
    measured_at: MeasuredAt
    expected: Expected
    too_few: list[str]
    sample: Sample
    load: LoadSummary | None
    checks: Checks
    served_task: ServedTaskBrief | None
    memory: Memory
    slo_verdict: Literal["pass", "fail", "undecided"] | None
    slo_passed: bool | None
    slo_passes: str | None
    slo_verdicts: list[SloVerdict]
    judged_from: str
    quality: Quality


class Closest(Strict):
    """A pair's nearest miss where nothing was recommended."""

    pair: str
    server_point: str | None
    load_point: str | None
    excluded_for_quality: str | None
    reasons: list[str]


class NoneFound(_Entry):
    """A workload (or profile) nothing may be recommended for, and why."""

    status: Literal["none"] = Field(description=STATUS)
    variant: None = None
    engine: None = None
    reason: str
    closest: list[Closest]


def entry_model(data: Any) -> type[Recommended] | type[NoneFound]:
    """The model of one entry, by its status."""
    status = data.get("status") if isinstance(data, dict) else None
    return NoneFound if status == "none" else Recommended


__all__ = ["CURRENT", "STATUS", "NoneFound", "Recommended", "Unsettled", "entry_model"]
