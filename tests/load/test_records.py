"""The per-request record's file format: what is written is read back unchanged, lines written
before read still, and writing a record costs the load process's event loop the same whatever
the record's length."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from quantbench.load.records import RequestRecord, Tally, read_records, write_records
from quantbench.schemas.io import StageOutputError
from quantbench.schemas.records import RECORD_FIELDS, RecordLine

# One line as the load generator wrote it before the record had one definition (a dataclass in
# quantbench.load.records beside the schema's RecordLine): the file's format, byte for byte.
WRITTEN_BEFORE = (
    '{"schema_version":1,"request_id":"r1","index":3,"point":"c64","scenario":"s",'
    '"prompt_id":"p","phase":"measured","worker":0,"send_time":10.0,"scheduled_time":9.5,'
    '"requested_tokens":4,"conversation":"c","turn":1,"first_token_time":10.05,'
    '"end_time":10.09,"chunk_times":[10.05,10.07],"chunk_tokens":[1,2],"prompt_tokens":null,'
    '"cached_tokens":0,"draft_tokens":null,"draft_accepted":null,"output_tokens":3,'
    '"tokens_source":"usage","status":"completed","http_status":200,"error":null,'
    '"finish_reason":"length","output_text":"tok \\u00e9"}'
)


def _record(chunks: int) -> RequestRecord:
    return RequestRecord(
        request_id="r1", index=3, point="c64", scenario="s", prompt_id="p", phase="measured",
        worker=0, send_time=10.0, first_token_time=10.05, end_time=10.05 + 0.02 * chunks,
        chunk_times=[10.05 + 0.02 * i for i in range(chunks)], chunk_tokens=[1] * chunks,
        output_tokens=chunks, tokens_source="usage", output_text="tok " * chunks,
    )  # fmt: skip


def test_the_record_is_the_schemas_line() -> None:
    """One definition: the load generator's record is the schema's line, its fields the line's
    but for the version."""
    assert RequestRecord is RecordLine
    assert tuple(RecordLine.model_fields) == ("schema_version", *RECORD_FIELDS)


def test_a_record_is_read_back_as_written(tmp_path: Path) -> None:
    rec = _record(24)
    assert RequestRecord.from_dict(rec.as_dict()) == rec  # a load worker's message
    assert "schema_version" not in rec.as_dict()
    write_records(tmp_path / "r.jsonl", [rec, _record(1)])
    assert read_records(tmp_path / "r.jsonl") == [rec, _record(1)]
    # each line carries its version, first, then the fields in the schema's order
    line = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert list(line) == ["schema_version", *RECORD_FIELDS]
    assert line["schema_version"] == RecordLine.current_version()


def test_a_line_is_written_as_before_and_one_written_before_reads(tmp_path: Path) -> None:
    rec = RequestRecord(
        request_id="r1", index=3, point="c64", scenario="s", prompt_id="p", phase="measured",
        worker=0, send_time=10.0, scheduled_time=9.5, requested_tokens=4, conversation="c",
        turn=1, first_token_time=10.05, end_time=10.09, chunk_times=[10.05, 10.07],
        chunk_tokens=[1, 2], cached_tokens=0, output_tokens=3, tokens_source="usage",
        http_status=200, finish_reason="length", output_text="tok \u00e9",
    )  # fmt: skip
    assert rec.to_json() == WRITTEN_BEFORE
    path = tmp_path / "records.jsonl"
    path.write_text(WRITTEN_BEFORE + "\n", encoding="utf-8")
    assert read_records(path) == [rec]


def test_a_workers_record_with_a_wrong_field_names_it() -> None:
    data = _record(1).as_dict()
    with pytest.raises(ValueError, match=r"worker 2: surprise: Extra inputs"):
        RequestRecord.from_dict({**data, "surprise": 1}, where="worker 2")
    with pytest.raises(ValueError, match=r"record: phase: Input should be"):
        RequestRecord.from_dict({**data, "phase": "later"})


def test_older_lines_read_and_a_broken_one_names_its_line(tmp_path: Path) -> None:
    """Lines written before the schema had no version, and the first ones a flag `warmup` where
    later ones have the request's phase; a line that is not JSON names its file, line and the
    stage to rerun."""
    data = _record(3).as_dict()
    old = {k: v for k, v in data.items() if k != "phase"} | {"warmup": True}
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(data) + "\n" + json.dumps(old) + "\n")
    current, oldest = read_records(path)
    assert (
        current == _record(3)
        and oldest.phase == "warmup"
        and oldest.chunk_times == data["chunk_times"]
    )
    path.write_text(json.dumps(data) + "\n{not json\n")
    with pytest.raises(StageOutputError, match=r"records.jsonl:2: not valid JSON.*bench@"):
        read_records(path)


def test_the_tally_counts_records_by_status() -> None:
    """What the dispatcher and the load process's progress line count, in one place: the unsent
    count with the incomplete (neither answered nor failed)."""
    tally = Tally()
    statuses = ["completed", "completed", "failed", "incomplete", "unsent"]
    for status in statuses:
        tally.add(_record(2).model_copy(update={"status": status}))
    assert (tally.completed, tally.failed, tally.incomplete) == (2, 1, 2)
    assert (tally.records, tally.chunks) == (5, 10)


def _python_calls(fn) -> int:  # type: ignore[no-untyped-def]
    calls = 0

    def count(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_writing_a_record_does_not_walk_its_chunks_in_python() -> None:
    """The load process writes each record as its request ends, in the event loop that reads
    every other stream's chunks. `dataclasses.asdict` deep-copied each chunk time in Python
    (230 us for 24 chunks): 64 streams ending together held the others' chunks back 15 ms, one
    request in a hundred measured that late (tests/load/test_accuracy.py, CI at 64 streams).
    The JSON encoder, in C, walks the lists; the Python work is the same for 1 chunk or 1,000."""
    short = _python_calls(_record(1).to_json)
    long = _python_calls(_record(1000).to_json)
    assert long == short, f"{short} Python calls for 1 chunk, {long} for 1,000"
