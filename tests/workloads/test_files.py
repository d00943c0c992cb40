"""User workloads from files: conversations and traces, with errors that name the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantbench.workloads.files import WorkloadFileError, read_conversations, read_trace
from quantbench.workloads.generate import Corpus

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_conversations_with_turns_think_times_and_lengths(tmp_path: Path) -> None:
    path = write(tmp_path, [{
        "id": "c1", "max_tokens": 50, "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi", "max_tokens": 8},
            {"role": "assistant", "content": "one two three"},
            {"role": "user", "content": "More?", "think_s": 2.5},
            {"role": "assistant", "content": "a b c d e f"},
        ]}])  # fmt: skip
    (conv,) = read_conversations(path, default_max_tokens=None, scenario="mine")
    assert conv.system == "Be brief." and conv.prompt_id == "c1"
    assert [(t.content, t.max_tokens, t.think_s) for t in conv.turns] == [
        ("Hi", 8, 0.0),
        ("More?", 6, 2.5),  # no max_tokens: the reference answer's length
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("{oops", "w.jsonl:2: not valid JSON"),
        (["a list"], "w.jsonl:2: each line must be a JSON object, got list"),
        ({"messages": []}, "w.jsonl:2: 'messages' must be a non-empty list"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "w.jsonl:2: message 0 has role 'tool'"),
        (
            {"messages": [{"role": "user", "content": "x", "think_s": -1}]},
            "think_s must be seconds",
        ),
        ({"messages": [{"role": "user", "content": "x"}]}, "w.jsonl:2: turn 0 has no max_tokens"),
        (
            {"id": "c1", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]},
            "id 'c1' appears twice",
        ),
    ],
)
def test_a_malformed_conversation_names_its_line(tmp_path: Path, row, message: str) -> None:
    good = {"id": "c1", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}
    path = write(tmp_path, [good, row])
    with pytest.raises(WorkloadFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_conversations(path, default_max_tokens=None, scenario="s")


def test_a_trace_replays_arrivals_and_shares_blocks(tmp_path: Path) -> None:
    path = write(tmp_path, [
        {"timestamp": 1000, "input_length": 20, "output_length": 5, "hash_ids": [1]},
        {"timestamp": 1500, "input_length": 20, "output_length": 7, "hash_ids": [1]},
        {"arrival_s": 3.0, "text": "given text", "output_length": 3},
    ])  # fmt: skip
    corpus = Corpus([REPO / "data/eval.txt"])
    convs, arrivals = read_trace(path, corpus, scenario="t", block_tokens=8)
    assert arrivals == [0.0, 0.5, 2.0]
    first, second, third = (c.turns[0].content for c in convs)
    assert first.split()[:8] == second.split()[:8]  # the same hash id, the same block
    assert len(first.split()) == 20 and third == "given text"
    assert [c.turns[0].max_tokens for c in convs] == [5, 7, 3]


def test_a_trace_that_goes_back_in_time_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, [
        {"timestamp": 2000, "input_length": 4, "output_length": 2},
        {"timestamp": 1000, "input_length": 4, "output_length": 2},
    ])  # fmt: skip
    with pytest.raises(WorkloadFileError, match="w.jsonl:2: arrivals must not go back in time"):
        read_trace(path, Corpus([REPO / "data/eval.txt"]), scenario="t")


def test_a_line_separator_inside_a_string_stays_in_its_line(tmp_path: Path) -> None:
    """Conversations files and prompt datasets are read by one JSON Lines reader, which cuts at
    newlines only: U+2028 is a line separator to Python, a character to JSON."""
    from quantbench.workloads.prompts import load_dataset
    from quantbench.workloads.spec import DatasetPrompts

    text = "one\u2028two\x85three"
    row = {"id": "c1", "max_tokens": 8, "messages": [{"role": "user", "content": text}]}
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(row, ensure_ascii=False) + "\r\n", encoding="utf-8")
    (conv,) = read_conversations(path, default_max_tokens=8, scenario="s")
    assert conv.turns[0].content == text
    (item,) = load_dataset(DatasetPrompts(path=path))
    assert item.as_messages()[0]["content"] == text
