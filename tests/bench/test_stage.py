"""The bench stage's run of one pair (quantbench.bench.stage): the key that decides whether an
interrupted run's points are reused, and the folder written whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.bench.job import JobPaths, workloads_job
from quantbench.bench.spec import BenchSettings
from quantbench.bench.stage import SUMMARY, resume_key, run_pair_to
from quantbench.decision.margins import DecisionMargins
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import PairSummary
from quantbench.slo import NO_SLO, Slo
from quantbench.workloads.spec import WorkloadSpec

from .conftest import FakeSettings

CHAT = WorkloadSpec.model_validate(
    {
        "name": "chat",
        "prompts": {"source": "random", "input_len": 8, "output_len": 4, "num_prompts": 2},
        "load": [{"kind": "concurrency", "concurrency": 1}],
        "num_requests": 2,
        "fixed_output_length": True,
    }
)


def test_the_resume_key_changes_with_what_was_measured_and_only_with_it(
    fake_engine, fake_artifact, tmp_path: Path
) -> None:
    paths = JobPaths(variants=tmp_path / "variants", workloads=tmp_path / "workloads")
    (paths.variants / fake_artifact.name).mkdir(parents=True)
    (paths.variants / fake_artifact.name / "model.safetensors").write_bytes(b"weights")
    paths.workloads.mkdir()
    (paths.workloads / "chat.jsonl").write_text('{"turns": []}\n')
    env = tmp_path / "env.json"

    def key(settings=None, slo="ttft<=1s", **extra) -> str:
        job = workloads_job("p", fake_artifact, fake_engine, settings or FakeSettings(),
                            {"chat": CHAT}, Slo(slo), BenchSettings(), **extra)  # fmt: skip
        return resume_key(job, paths, env)

    first = key()
    assert key() == first  # the same measurement: an interrupted run's points are kept
    assert key(slo="ttft<=2s") != first
    # other margins move where the race stops a point
    assert key(margins=DecisionMargins(equivalence=0.1)) != first
    assert key(FakeSettings(itl_ms=9.0)) != first
    (paths.variants / fake_artifact.name / "model.safetensors").write_bytes(b"other weights")
    assert key() != first  # another variant's files
    changed = key()
    (paths.workloads / "chat.jsonl").write_text('{"turns": [1]}\n')
    assert key() != changed  # other traffic
    changed = key()
    env.write_text("{}")
    assert key() != changed  # another environment


@pytest.mark.server  # a scripted server
def test_run_pair_to_writes_the_folder_whole_with_its_summary(
    fake_engine, fake_artifact, tmp_path: Path
) -> None:
    job = workloads_job("p", fake_artifact, fake_engine, FakeSettings(), {"chat": CHAT}, NO_SLO,
                        BenchSettings())  # fmt: skip
    out = tmp_path / "out"
    summary = run_pair_to(job, out)
    assert schema_io.read(out / SUMMARY, PairSummary) == summary
    assert [r.completed for r in summary.rows] == [2]
    assert [p.name for p in tmp_path.iterdir() if "out" in p.name] == ["out"]  # no .out.tmp-PID
