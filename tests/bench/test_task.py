"""The fine-tune's task scored through the pair's own bench server by lm-evaluation-harness:
once per pair, exact against a scripted server that knows the answers, and a pair whose server
answers otherwise than the offline evaluation is flagged and never recommended."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.bench.run import PairJob, run_pair
from quantbench.bench.spec import BenchSettings
from quantbench.bench.task import TaskJob
from quantbench.load.session import build_traffic
from quantbench.qa import load_qa
from quantbench.quality.spec import ServedTaskSettings
from quantbench.schemas.common import HeldoutAnswer
from quantbench.slo import NO_SLO
from quantbench.workloads.spec import WorkloadSpec

from .conftest import FakeEngine, FakeSettings

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[2]
ITEMS = load_qa(REPO / "data/heldout.jsonl")[:8]
WORKLOAD = WorkloadSpec.model_validate(
    {
        "prompts": {"source": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
        "load": [{"kind": "concurrency", "concurrency": 1}],
        "num_requests": 2,
        "name": "chat",
    }
)
# The scripted server's per-token delays (ms), one per server setting: long enough that a request
# (20 ms to its first token, then 4 tokens) outlasts the closed loop's turnaround between one
# request and the next many times over. At 2-3 ms a token a request took about 28 ms, and on a
# loaded 2-core CI machine the client's ~2 ms between requests left the one stream 0.93 busy:
# the load check rightly flagged the row (the harness was the bottleneck) and the test of the
# task failed on it (an AVX2-only EPYC, 2026-12-02).
ITL_MS = [40.0, 60.0]


def _job(engine, artifact, settings, offline) -> PairJob:  # type: ignore[no-untyped-def]
    return PairJob(
        name="tiny-fake", artifact=artifact, engine=engine, settings=settings,
        workloads={"chat": WORKLOAD}, traffic={"chat": build_traffic(WORKLOAD, None)}, slo=NO_SLO,
        bench=BenchSettings(price_per_hour=3.6, race=False),
        task=TaskJob(items=ITEMS, offline=offline, max_new_tokens=32, confidence=0.95,
                     settings=ServedTaskSettings(concurrency=2)),
    )  # fmt: skip


def _offline(ok: list[bool]) -> list[HeldoutAnswer]:
    return [
        HeldoutAnswer(question=i.question, expected=i.answer, got=i.answer if o else "no", ok=o)
        for i, o in zip(ITEMS, ok, strict=True)
    ]


def test_the_task_is_scored_once_per_pair_and_exactly(
    tmp_path: Path, fake_engine: FakeEngine, fake_artifact
) -> None:  # type: ignore[no-untyped-def]
    """A server that knows 5 of the 8 answers scores 5 of 8 through lm-eval, the same 5 the
    offline run got right: agrees. Two server settings, one scoring (the first server's)."""
    known = {i.question: i.answer for k, i in enumerate(ITEMS) if k % 3}
    settings = FakeSettings(answers=known, sweep={"itl_ms": ITL_MS})
    summary = run_pair(_job(fake_engine, fake_artifact, settings, _offline(
        [i.question in known for i in ITEMS])), tmp_path / "out")  # fmt: skip
    task = summary.task
    assert task is not None and task.verdict == "agrees", task
    heldout = task.scores[0]
    assert (heldout.task, heldout.correct, heldout.total) == ("quantbench_heldout", 5, 8)
    assert [a.ok for a in heldout.answers] == [i.question in known for i in ITEMS]
    assert heldout.answers[1].got == ITEMS[1].answer  # the server's text, as lm-eval got it
    assert heldout.interval is not None and heldout.interval[0] < 5 / 8 < heldout.interval[1]
    assert task.agreement is not None and task.agreement.both == 5 and task.agreement.neither == 3
    assert task.server_point == summary.servers[0].server_point
    assert all(row.rankable for row in summary.rows), [row.flags for row in summary.rows]


def test_a_pair_that_answers_the_task_otherwise_is_never_recommended(
    tmp_path: Path, fake_engine: FakeEngine, fake_artifact
) -> None:  # type: ignore[no-untyped-def]
    """Offline, the variant knew all 8; its server answers none: exact McNemar p = 2/2^8, beyond
    noise. Every row of the pair, the second server's too, carries the flag; no best."""
    settings = FakeSettings(sweep={"itl_ms": ITL_MS})
    summary = run_pair(_job(fake_engine, fake_artifact, settings, _offline([True] * 8)),
                       tmp_path / "out")  # fmt: skip
    task = summary.task
    assert task is not None and task.verdict == "differs", task
    assert task.agreement is not None and task.agreement.offline_only == 8
    assert task.agreement.p_value == pytest.approx(2 / 2**8)
    assert len(summary.rows) == 2 and {r.server_point for r in summary.rows} == {
        s.server_point for s in summary.servers
    }
    for row in summary.rows:
        assert not row.rankable
        assert any("the fine-tune's task answered otherwise" in f for f in row.flags), row.flags
    assert summary.best == {"chat": None}


def test_a_task_that_cannot_be_scored_costs_no_point(
    tmp_path: Path, fake_engine: FakeEngine, fake_artifact
) -> None:  # type: ignore[no-untyped-def]
    """Questions that are not the offline run's (the held-out file changed since evaluate):
    scored, not compared, said why; the pair's points run and rank as before."""
    offline = _offline([True] * 8)
    offline[0] = offline[0].model_copy(update={"question": "another question"})
    summary = run_pair(
        _job(fake_engine, fake_artifact, FakeSettings(itl_ms=ITL_MS[0]), offline), tmp_path / "o"
    )
    task = summary.task
    assert task is not None and task.verdict == "not compared", task
    assert "changed since the evaluate stage ran" in task.note
    assert [r.rankable for r in summary.rows] == [True]


def test_a_screened_pair_is_not_asked_the_task(
    tmp_path: Path, fake_engine: FakeEngine, fake_artifact
) -> None:  # type: ignore[no-untyped-def]
    """A pair the quality gate already excludes cannot be recommended whatever its server
    answers: no question is sent (the server that knows none would be flagged otherwise), the
    summary says why, and its points run at their floor as screening says."""
    settings = FakeSettings(sweep={"itl_ms": ITL_MS})
    job = _job(fake_engine, fake_artifact, settings, _offline([True] * 8))
    job.screened = "mean KL divergence from the merged model 0.35 [0.32, 0.38] beyond <= 0.15"
    summary = run_pair(job, tmp_path / "out")
    task = summary.task
    assert task is not None and task.verdict == "not scored" and task.scores == []
    assert task.note == f"not asked: the pair is screened ({job.screened})"
    assert not any("answered otherwise" in f for r in summary.rows for f in r.flags)
    assert summary.server_points == 1
