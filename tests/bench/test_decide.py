"""The decide stage as one library function (quantbench.bench.decide): planned from the
screening, measured within its budget, written whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.bench.conftest import FakeSettings
from tests.report.conftest import build_fixture_tree

from quantbench.bench import decide
from quantbench.bench.job import workloads_job
from quantbench.config import Config, load_config
from quantbench.report.spec import ConfirmSettings, ReportSettings
from quantbench.schemas import io as schema_io
from quantbench.schemas.decide import ConfirmFile

CONTENDER = "bf16-transformers/continuous_batching=on/chat/c4"
LEADER = "gguf-q4_k_m-llamacpp/default/chat/c4"


def _config(**confirm: object) -> Config:
    config = load_config("params.yaml")
    return config.model_copy(update={"report": ReportSettings(confirm=ConfirmSettings(**confirm))})


@pytest.fixture
def jobs(monkeypatch, fake_engine, fake_artifact) -> list[str]:  # type: ignore[no-untyped-def]
    """The pairs' jobs on the fake engine (no model files); the pairs asked for, in order."""
    made: list[str] = []

    def job(config, name, paths):  # type: ignore[no-untyped-def]
        made.append(name)
        return workloads_job(name, fake_artifact, fake_engine, FakeSettings(),
                             dict(config.workloads), config.slo, config.bench)  # fmt: skip

    monkeypatch.setattr(decide, "pair_job", job)
    return made


def test_the_decide_stage_plans_the_screenings_open_question_within_its_budget(
    tmp_path: Path, jobs: list[str]
) -> None:
    tree = build_fixture_tree(tmp_path / "tree", confirm=False)
    result = decide.decide_stage(_config(budget_s=0), tree)
    assert schema_io.read(tree / ConfirmFile.OUTPUT, ConfirmFile) == result
    (duel,) = result.duels  # the contender the rows alone cannot separate from the leader
    assert (duel.purpose, duel.a, duel.b) == ("contender", CONTENDER, LEADER)
    assert duel.rounds == [] and result.servers == []  # no budget: no server started
    assert jobs == ["bf16-transformers", "gguf-q4_k_m-llamacpp"]
    assert result.budget_s == 0 and result.enabled


def test_off_it_measures_nothing_and_says_what_the_screening_noted(
    tmp_path: Path, jobs: list[str]
) -> None:
    tree = build_fixture_tree(tmp_path / "tree", confirm=False)
    (tree / "reports/quality/bf16.json").unlink()
    out = tmp_path / "decide"
    result = decide.decide_stage(_config(enabled=False), tree, out)
    assert result.duels == [] and not result.enabled and jobs == []
    assert any("bf16.json: missing" in n for n in result.notes)
    assert schema_io.read(out / "confirm.json", ConfirmFile) == result
