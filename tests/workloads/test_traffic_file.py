"""A workload's traffic file (reports/workloads/<name>.jsonl): each line carries its version, and
lines written before they had one still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantbench.schemas.io import SchemaVersionError, StageOutputError
from quantbench.schemas.workloads import TrafficLine
from quantbench.workloads.plan import Conversation, Turn
from quantbench.workloads.traffic import Traffic

CONVERSATIONS = [
    Conversation(
        "p0", "chat", [Turn("Hello", 8), Turn("More?", 4, think_s=2.5)], system="Be brief"
    ),
    Conversation("p1", "chat", [Turn("A prompt", 16)], raw_prompt="A prompt"),
]


def _lines(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("schedule", [None, [0.0, 1.5]])
def test_each_line_carries_its_version_and_reads_back(
    tmp_path: Path, schedule: list[float] | None
) -> None:
    Traffic("w", CONVERSATIONS, schedule).write(tmp_path)
    lines = _lines(tmp_path / "w.jsonl")
    assert [line["schema_version"] for line in lines] == [TrafficLine.current_version()] * 2
    assert all(list(line) == sorted(line) for line in lines)
    assert all(("arrival_s" in line) == (schedule is not None) for line in lines)
    again = Traffic.read(tmp_path, "w")
    assert (again.conversations, again.schedule) == (CONVERSATIONS, schedule)


def test_lines_written_before_the_version_read_as_version_zero(tmp_path: Path) -> None:
    """Before its version a line was the same conversation without ``schema_version``."""
    Traffic("w", CONVERSATIONS, [0.0, 1.5]).write(tmp_path)
    old = [
        {k: v for k, v in line.items() if k != "schema_version"}
        for line in _lines(tmp_path / "w.jsonl")
    ]
    (tmp_path / "w.jsonl").write_text(
        "".join(json.dumps(line, sort_keys=True) + "\n" for line in old), encoding="utf-8"
    )
    again = Traffic.read(tmp_path, "w")
    assert (again.conversations, again.schedule) == (CONVERSATIONS, [0.0, 1.5])


def test_a_bad_line_names_its_file_line_and_the_stage(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    good = json.dumps({"prompt_id": "p", "scenario": "s", "turns": []})
    path.write_text(good + "\n" + json.dumps({"prompt_id": "p"}) + "\n", encoding="utf-8")
    with pytest.raises(
        StageOutputError, match=r"w.jsonl:2: not a valid TrafficLine.*dvc repro workloads"
    ):
        Traffic.read(tmp_path, "w")
    path.write_text(good + "\n{oops\n", encoding="utf-8")
    with pytest.raises(StageOutputError, match=r"w.jsonl:2: not valid JSON"):
        Traffic.read(tmp_path, "w")
    newer = json.dumps({"schema_version": 99, "prompt_id": "p", "scenario": "s", "turns": []})
    path.write_text(newer + "\n", encoding="utf-8")
    with pytest.raises(SchemaVersionError, match=r"w.jsonl:1: schema version 99 is newer"):
        Traffic.read(tmp_path, "w")
