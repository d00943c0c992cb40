"""best_config.json: per workload (and per extra SLO profile), the configuration to deploy.

``{"<workload>": {...}, "<workload>:<profile>": {...}}``, each entry a versioned
:class:`~quantbench.schemas.best_config.Recommended` or ``NoneFound`` (the schema validates what
is written here and what ``quantbench gather`` reads): the winning variant and engine, the
server settings, the exact command line and environment the bench stage started it with, the load
it was measured at, its figures each with its confidence interval (or ``too_few``), the sample,
the load it reached, its checks, each SLO constraint's verdict, memory, the quality given up
against the merged model, the rule that decided and the configurations it is tied with. Its
``status`` is the decision's: ``decided``, or ``provisional`` with ``unsettled`` naming every row
still open and what more measurement would settle it (:mod:`quantbench.decision.settlement`), and its
``headline`` is summary.md's bold line. A workload nothing is ranked for has ``status:
"none"``, its ``reason``, and the nearest miss per pair with its flags.
"""

from __future__ import annotations

from typing import Any

from quantbench.decision.profiles import JudgedRow, Profile
from quantbench.decision.settlement import Settlement, settlement
from quantbench.outputs import HEADLINE_METRICS, ReportInputs, clean_json
from quantbench.report.deploy import deploy_entry
from quantbench.report.recommend import winner_headline
from quantbench.report.tables import (
    QualityDelta,
    QualityReference,
    command_line,
    pair_lines,
    too_few_text,
)
from quantbench.schemas.bench import ServedTask
from quantbench.schemas.best_config import CURRENT, NoneFound, Recommended

# Entry versions: 2 keyed by workload ('<workload>:<profile>' for extra profiles), figures with
# intervals, ties and the deciding rule; 3 the decision (each row against the leader with the
# interval on their ratio, trade-offs, stability over resamples, the status); then the schema's
# version 1 (schemas.best_config: schema_version for format_version, a tie's figure under
# `figure`); 2 the status decided / provisional for "ok", the headline, the rows unsettled.


def _quality(delta: QualityDelta) -> dict[str, Any]:
    r, ref = delta.report, delta.reference
    if r is None:
        return {"evaluated": False}
    high = r.kl_divergence.high
    return {
        "evaluated": True,
        "perplexity": r.perplexity,
        "reference_perplexity": ref.perplexity,
        "perplexity_ratio": r.perplexity_ratio,
        "perplexity_delta": delta.perplexity_delta,
        "kl_divergence_mean": r.kl_divergence.mean,
        "kl_divergence_high": {"statistic": high[0], "value": high[1]} if high else None,
        "top1_agreement": r.top1_agreement,
        "heldout_accuracy": r.heldout_accuracy,
        "reference_heldout_accuracy": ref.heldout_accuracy,
        "reference_heldout_source": ref.heldout_source,
        "heldout_delta": delta.heldout_delta,
        "summary": delta.given_up(),
    }


def figures(judged: JudgedRow) -> dict[str, Any]:
    """Each headline figure: {value, low, high, confidence, n, method}, or {value, too_few}."""
    row = judged.row
    out: dict[str, Any] = {}
    for name in HEADLINE_METRICS:
        value = row.metric(name)
        if name in row.too_few:
            out[name] = {"value": value, "too_few": True, "note": too_few_text(name)}
        elif name in row.intervals:
            out[name] = row.intervals[name].model_dump()
        elif value is not None:
            out[name] = {"value": value}
    return out


def _tie(judged: JudgedRow, metric: str) -> dict[str, Any]:
    row = judged.row
    iv = row.intervals.get(metric)
    return {
        "pair": judged.pair,
        "variant": judged.variant,
        "engine": judged.engine,
        "server_point": row.server_point,
        "load_point": row.load_point,
        "key": judged.key,
        "metric": metric,
        "figure": iv.model_dump() if iv is not None else {"value": row.metric(metric)},
        "perplexity_ratio": judged.perplexity_ratio,
        "peak_rss_bytes": judged.peak_rss_bytes,
        "e2e_p99_ms": row.metric("e2e_p99_ms"),
    }


def decision_json(profile: Profile) -> dict[str, Any] | None:
    """How the decision was made: the status, each rankable row against the leader, what a
    tie-break traded, and how often each configuration wins the resampled decision (None: no
    decision was made)."""
    d = profile.decision
    if d is None:
        return None
    confidence = profile.how.settings.confidence if profile.how else 0.95
    comparisons = []
    for key, c in sorted(d.comparisons.items()):
        entry: dict[str, Any] = {"key": key, "verdict": c.verdict, "source": c.source}
        if c.contrast is not None:
            low, high = c.contrast.interval(confidence)
            entry.update(ratio=c.contrast.ratio, low=low, high=high, confidence=confidence,
                         how=c.contrast.how)  # fmt: skip
        comparisons.append(entry)
    settings = profile.how.settings if profile.how else None
    return {
        "status": d.status,
        "rule": d.rule,
        "leader": d.leader.key if d.leader else None,
        "contenders": d.contenders,
        "comparisons": comparisons,
        "tradeoffs": list(d.tradeoffs),
        "stability": dict(profile.stability),
        "resamples": profile.how.resamples if profile.how else 0,
        "equivalence": settings.equivalence if settings else None,
        "drift": settings.drift if settings else None,
    }


def _unsettled(settled: Settlement) -> list[dict[str, Any]]:
    return [
        {"key": o.key, "label": o.label, "why": o.why, "differs": list(o.differs),
         "comparison": o.comparison, "to_settle": o.to_settle}
        for o in settled.open
    ]  # fmt: skip


def _winner(
    inputs: ReportInputs, profile: Profile, judged: JudgedRow, reference: QualityReference
) -> dict[str, Any]:
    summary = inputs.pairs[judged.pair]
    row = judged.row
    server = summary.server(row.server_point)
    recipe = inputs.variants.get(judged.variant)
    quality = inputs.quality.get(judged.variant)
    argv = row.command or (server.command if server else [])
    env = row.env or (server.env if server else {})
    metric = profile.ranked_by
    settled = settlement(inputs, profile)
    return {
        "status": settled.status,
        "headline": winner_headline(judged, metric, settled),
        "unsettled": _unsettled(settled),
        "schema_version": CURRENT,
        "workload": profile.workload,
        "profile": profile.name,
        "slo": profile.slo,
        "ranked_by": metric,
        "decided_by": profile.decided_by,
        "decision": decision_json(profile),
        "ties": [_tie(t, metric) for t in profile.ties],
        "pair": judged.pair,
        "variant": judged.variant,
        "format": summary.format,
        "recipe": recipe.recipe if recipe else (quality.recipe if quality else None),
        "engine": judged.engine,
        "engine_version": summary.engine_version,
        "server_point": row.server_point,
        "settings": row.settings,
        "command": argv,
        "command_line": command_line(argv),
        "env": env,
        # the same server as a deployment starts it: from the project's root, on a host and
        # port of the user's choosing, without the harness's own flags (report/deploy.py)
        "deploy": {
            **deploy_entry(argv, env, judged.engine, inputs.root, row.settings),
            "engine": judged.engine,
            "engine_version": summary.engine_version,
        },
        "measured_at": {"workload": row.workload, "load_point": row.load_point, "shape": row.shape},
        "expected": {
            **figures(judged),
            **({"rerun": profile.rerun.model_dump()} if profile.rerun is not None else {}),
            "cost_per_million_tokens": row.cost_per_million_tokens,
            "currency": summary.currency,
            "price_per_hour": summary.price_per_hour,
        },
        "too_few": list(row.too_few),
        "sample": {
            "repeats": row.repeats,
            "requests": row.requests,
            "completed": row.completed,
            "failed": row.failed,
            "incomplete": row.incomplete,
            "unsent": row.unsent,
            "not_served": row.not_served,
        },
        "load": row.load.model_dump() if row.load else None,
        "checks": {
            "lengths_ok": row.lengths_ok,
            "harness_ok": row.harness_ok,
            "served_check": judged.served_check,
            "cache": row.cache.model_dump() if row.cache else None,
        },
        "served_task": _served_task(summary.task),
        "memory": {
            "peak_rss_bytes": server.report.peak_rss_bytes if server else None,
            "peak_gpu_bytes": server.report.peak_gpu_bytes if server else None,
            "ready_seconds": server.report.ready_seconds if server else None,
            "size_on_disk_bytes": (recipe.size_bytes if recipe else None)
            or (quality.size_bytes if quality else None),
        },
        "slo_verdict": row.slo_verdict,
        "slo_passed": row.slo_passed,
        "slo_passes": row.slo_passes,
        "slo_verdicts": [v.to_dict() for v in judged.verdicts]
        or [{"reason": reason} for reason in row.slo_reasons],
        "judged_from": judged.judged_from,
        "quality": _quality(QualityDelta(judged.variant, quality, reference)),
        "not_recommended_for_quality": profile.gated,
    }


def _none(inputs: ReportInputs, profile: Profile, reference: QualityReference) -> dict[str, Any]:
    closest = []
    for line in pair_lines(inputs, profile, reference):
        row = line.row
        closest.append(
            {
                "pair": line.pair,
                "server_point": row.server_point if row else None,
                "load_point": row.load_point if row else None,
                "excluded_for_quality": profile.gated.get(line.variant),
                "reasons": line.reasons,
            }
        )
    if not profile.rows:
        reason = "no benchmark results for this workload (reports/bench is empty)"
    elif profile.gated and all(r.variant in profile.gated for r in profile.rows if r.rankable):
        reason = "configurations are ranked only with variants the quality gates exclude"
    else:
        reason = "no measured configuration meets every constraint and every check"
    return {
        "status": "none",
        "schema_version": CURRENT,
        "workload": profile.workload,
        "profile": profile.name,
        "slo": profile.slo,
        "ranked_by": profile.ranked_by,
        "variant": None,
        "engine": None,
        "reason": reason,
        "closest": closest,
        "not_recommended_for_quality": profile.gated,
    }


def best_config(
    inputs: ReportInputs, profiles: list[Profile], reference: QualityReference
) -> dict[str, Any]:
    """Each profile's entry, validated by its schema (a field that drifts from it fails the
    report stage, not the reader)."""
    out: dict[str, Any] = {}
    for profile in profiles:
        if profile.best is not None:
            entry = Recommended.model_validate(
                clean_json(_winner(inputs, profile, profile.best, reference))
            )
        else:
            entry = NoneFound.model_validate(clean_json(_none(inputs, profile, reference)))
        out[profile.key] = entry.model_dump(mode="json")
    return clean_json(out)


def _served_task(task: ServedTask | None) -> dict[str, Any] | None:
    """The fine-tune's task through the chosen pair's server: each task's accuracy with its
    interval, and the verdict against the offline answers (answers left in the bench summary)."""
    if task is None:
        return None
    return {
        "verdict": task.verdict,
        "server_point": task.server_point,
        "harness": f"lm-evaluation-harness {task.harness}",
        "scores": [s.model_dump(mode="json", exclude={"answers"}) for s in task.scores],
        "against_offline": task.agreement.model_dump(mode="json") if task.agreement else None,
        "note": task.note,
    }
