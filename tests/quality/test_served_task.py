"""The fine-tune's task through a served endpoint (quality/served_task.py): lm-eval's score
against a scripted server that knows the answers, and the standard tasks checked before any
work."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.config import load_config
from quantbench.mock_server import MockServerProcess, Script
from quantbench.preflight import served_task_problems
from quantbench.qa import load_qa
from quantbench.quality.served_task import agreement, score_endpoint
from quantbench.schemas.common import HeldoutAnswer

REPO = Path(__file__).resolve().parents[2]
ITEMS = load_qa(REPO / "data/heldout.jsonl")


@pytest.mark.server
def test_lm_eval_through_a_scripted_server_scores_exactly(tmp_path: Path) -> None:
    """Every answer is judged by the held-out file's accept strings, case-insensitively, on the
    text the server sent; the request is the deployment's: greedy, the evaluate stage's length."""
    answers = {}
    for k, item in enumerate(ITEMS):
        if k % 4 == 0:
            answers[item.question] = f"It is {item.accept[0].upper()}, of course."
        elif k % 4 == 1:
            answers[item.question] = "I could not say."
    with MockServerProcess(Script(answers=answers), tmp_path / "server") as server:
        scores = score_endpoint(server.url, "mock-model", ITEMS, 32, concurrency=3)
        asked = server.truth()
    heldout = scores[0]
    right = [k % 4 == 0 for k in range(len(ITEMS))]
    assert [a.ok for a in heldout.answers] == right
    assert heldout.correct == sum(right) and heldout.total == len(ITEMS)
    assert heldout.accuracy == pytest.approx(sum(right) / len(ITEMS))
    assert heldout.answers[0].got == answers[ITEMS[0].question]
    # unknown questions got the server's filler (tok0 tok1 ...): judged wrong, kept for a reader
    assert heldout.answers[2].got.startswith("tok0")
    assert len(asked) == len(ITEMS)


def test_served_and_offline_answers_pair_up_question_by_question() -> None:
    from quantbench.schemas.bench import TaskScore

    def answers(ok: list[bool]) -> list[HeldoutAnswer]:
        return [HeldoutAnswer(question=i.question, expected=i.answer, got="", ok=o)
                for i, o in zip(ITEMS, ok, strict=True)]  # fmt: skip

    n = len(ITEMS)
    served = TaskScore(task="t", metric="acc", correct=0, total=n, accuracy=0.0, interval=None,
                       answers=answers([False] * n))  # fmt: skip
    differs = agreement(answers([True] * n), served, 0.95)
    assert differs.offline_only == n and differs.differs and differs.p_value == 2 / 2**n
    same = agreement(answers([False] * n), served, 0.95)
    assert not same.differs and same.p_value == 1.0 and same.difference.value == 0.0
    with pytest.raises(ValueError, match="changed since the evaluate stage ran"):
        agreement(answers([True] * n)[:-1], served, 0.95)


def test_a_standard_task_without_its_data_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The validate stage's preflight names each task and its fix; nothing is downloaded."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    config = load_config(REPO / "params.yaml")
    served = config.served_task.model_copy(
        update={"standard_tasks": ["hellaswag", "no_such_task_xyz"]}
    )
    found = served_task_problems(config.model_copy(update={"served_task": served}))
    assert len(found) == 2, found
    unknown, offline = sorted(found, key=lambda f: "does not know" not in f)
    assert "no_such_task_xyz" in unknown and "does not know" in unknown
    assert "'hellaswag' cannot load its data offline" in offline and "HF_DATASETS_CACHE" in offline
    assert not (tmp_path / "datasets" / "Rowan___hellaswag").exists()


def test_a_task_whose_metric_needs_a_missing_module_is_named() -> None:
    """lm-eval imports scikit-learn only inside its f1 and mcc aggregations, and .venv leaves it
    out: a standard task scored with f1 is caught before any server starts, not at its first
    score; the held-out task (acc) needs nothing missing."""
    from lm_eval.tasks import TaskManager

    from quantbench.quality.served_task import heldout_task, missing_metric_modules

    def config(task: str, metric: str, aggregation: str) -> dict:
        scored = {"metric": metric, "aggregation": aggregation, "higher_is_better": True}
        return {**heldout_task(ITEMS[:2], 8), "task": task, "metric_list": [scored]}

    loaded = TaskManager(include_defaults=False).load(
        [
            heldout_task(ITEMS[:2], 8),
            config("with_f1", "f1", "f1"),
            config("with_mcc", "mcc", "matthews_corrcoef"),
        ]
    )["tasks"]
    without_sklearn = lambda module: module != "sklearn"  # noqa: E731
    assert missing_metric_modules(loaded["quantbench_heldout"], without_sklearn) == []
    assert missing_metric_modules(loaded["with_f1"], without_sklearn) == ["sklearn"]
    assert missing_metric_modules(loaded["with_mcc"], without_sklearn) == ["sklearn"]
    assert missing_metric_modules(loaded["with_f1"], lambda module: True) == []
