"""The pair's tasks scored on its own bench server, once: the first server point that starts
one answers the fine-tune's held-out questions (and any standard lm-eval tasks) through
lm-evaluation-harness (quality/served_task.py), before its load points. No second server start:
on CPU a vLLM start is a minute, and a deployment decision wants every pair scored.

The answers are held against the evaluate stage's, question by question; a pair whose served
answers differ beyond noise serves something else than was evaluated, and its rows carry that
flag, so it is never recommended.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from importlib import metadata

from quantbench.engines.server import Server
from quantbench.qa import QAItem
from quantbench.quality.served_task import agreement, score_endpoint
from quantbench.quality.spec import ServedTaskSettings
from quantbench.schemas.bench import ServedTask
from quantbench.schemas.common import HeldoutAnswer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskJob:
    """What scoring the pair's tasks needs: the evaluate stage's questions, answer length and
    confidence, and its answers (None where the variant has no quality report)."""

    items: list[QAItem]
    offline: list[HeldoutAnswer] | None
    max_new_tokens: int
    confidence: float
    settings: ServedTaskSettings


def _harness_version() -> str:
    try:
        return metadata.version("lm-eval")
    except metadata.PackageNotFoundError:
        return "not installed"


def score_on(server: Server, server_label: str, job: TaskJob) -> ServedTask:
    """Score the tasks through ``server``; never raises for the task's sake (a scoring that
    fails is recorded as such, and the load points run as they would)."""

    started = time.monotonic()
    common = {"server_point": server_label, "harness": _harness_version()}
    try:
        scores = score_endpoint(
            server.url,
            server.spec.model_name,
            job.items,
            job.max_new_tokens,
            standard_tasks=job.settings.standard_tasks,
            concurrency=job.settings.concurrency,
            timeout_s=job.settings.timeout_s,
            confidence=job.confidence,
        )
    except Exception as exc:  # lm-eval, the server, the network: the pair's points still run
        log.error("%s: the served task could not be scored: %s", server_label, exc)
        return ServedTask(
            verdict="not scored", note=f"{type(exc).__name__}: {str(exc)[:300]}", **common
        )
    seconds = round(time.monotonic() - started, 1)
    heldout = scores[0]
    log.info(
        "served task: %d of %d right through the server (%.0f s)",
        heldout.correct or 0,
        heldout.total,
        seconds,
    )
    if job.offline is None:
        return ServedTask(
            verdict="not compared", scores=scores, seconds=seconds,
            note="no offline answers to compare with (the variant's quality report is missing)",
            **common,
        )  # fmt: skip
    try:
        agreed = agreement(job.offline, heldout, job.confidence)
    except ValueError as exc:
        return ServedTask(
            verdict="not compared", scores=scores, seconds=seconds, note=str(exc), **common
        )
    offline_right = agreed.both + agreed.offline_only
    note = (
        f"{heldout.correct} of {heldout.total} right served, {offline_right} offline "
        f"({agreed.served_only} right only served, {agreed.offline_only} only offline; exact "
        f"McNemar p = {agreed.p_value:.3g})"
    )
    return ServedTask(
        verdict="differs" if agreed.differs else "agrees", scores=scores, agreement=agreed,
        seconds=seconds, note=note, **common,
    )  # fmt: skip


def mismatch(task: ServedTask | None) -> str | None:
    """The flag a pair's rows carry when its served task differs from the offline one."""
    if task is None or task.verdict != "differs":
        return None
    return f"the fine-tune's task answered otherwise served than offline: {task.note}"
