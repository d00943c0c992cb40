"""The per-request record's file format: what is written is read back unchanged, and writing a
record costs the load process's event loop the same whatever the record's length."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from quantbench.load.records import RequestRecord, read_records, write_records


def _record(chunks: int) -> RequestRecord:
    return RequestRecord(
        request_id="r1", index=3, point="c64", scenario="s", prompt_id="p", phase="measured",
        worker=0, send_time=10.0, first_token_time=10.05, end_time=10.05 + 0.02 * chunks,
        chunk_times=[10.05 + 0.02 * i for i in range(chunks)], chunk_tokens=[1] * chunks,
        output_tokens=chunks, tokens_source="usage", output_text="tok " * chunks,
    )  # fmt: skip


def test_a_record_is_read_back_as_written(tmp_path: Path) -> None:
    rec = _record(24)
    assert RequestRecord.from_dict(json.loads(rec.to_json())) == rec
    write_records(tmp_path / "r.jsonl", [rec, _record(1)])
    assert read_records(tmp_path / "r.jsonl") == [rec, _record(1)]


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
