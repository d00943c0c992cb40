"""The data files params name: a path that is not a regular file, a file outside the project,
and content that parses but is wrong (quantbench.data), each named with the key, the file, the
lines and the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from quantbench.data import (
    DataFileError,
    chat_problems,
    check_data_file,
    jsonl_rows,
    outside_project,
    overlap_problem,
    path_problem,
    question_problems,
)


def test_a_folder_a_pipe_and_a_missing_file_are_each_said_as_what_they_are(tmp_path) -> None:
    """A folder and a named pipe were both "does not exist"; reading a pipe would wait for a
    writer forever."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data/train.jsonl").write_text("{}\n")
    assert "is a folder (it holds train.jsonl); give the file itself" in str(
        path_problem(tmp_path / "data", "data.train")
    )
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    assert "is a named pipe, not a file" in str(path_problem(pipe, "data.train"))
    with pytest.raises(DataFileError, match="named pipe"):
        check_data_file(pipe, "data.train")  # refused at once, not read
    assert "does not exist" in str(path_problem(tmp_path / "nope", "data.train"))
    assert path_problem(tmp_path / "data/train.jsonl", "data.train") is None


def test_a_path_with_a_control_character_is_shown_as_python_writes_it(tmp_path) -> None:
    problem = path_problem(tmp_path / "train\n.jsonl", "data.train")
    assert problem is not None and "train\\n.jsonl'" in problem


def test_a_data_file_outside_the_project_is_refused_with_why(tmp_path) -> None:
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    inside = project / "data/train.jsonl"
    assert outside_project(inside, "data.train", project) is None
    problem = outside_project(tmp_path / "elsewhere.jsonl", "data.train", project)
    assert problem is not None
    assert "outside the project" in problem and "another clone" in problem and "copy" in problem


def _rows(path: Path, rows: list[object]) -> list[tuple[int, object]]:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return jsonl_rows(path)


def _chat(q: str, a: str = "A.") -> dict[str, object]:
    return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}


def test_empty_and_repeated_chats_are_counted_with_their_lines(tmp_path) -> None:
    rows = _rows(tmp_path / "t.jsonl", [_chat("a"), _chat(" "), _chat("a"), _chat("b"),
                                        _chat("b")])  # fmt: skip
    empty, twice = chat_problems(rows, "data.train", tmp_path / "t.jsonl")
    assert "1 of 5 chats hold a turn with empty content (lines 2)" in empty
    assert "2 of 5 chats repeat an earlier chat (lines 3, 5)" in twice and "remove" in twice


def test_questions_that_cannot_be_judged_are_counted_with_their_lines(tmp_path) -> None:
    """An empty accept string matches every answer (every answer would count as right), and a
    question asked twice counts twice: both were accepted."""
    q = {"question": "Which?", "answer": "Z1", "accept": ["Z1"]}
    rows = _rows(tmp_path / "h.jsonl", [q, {**q, "question": "which? "}, {**q, "question": "Other",
                 "accept": ["Z1", ""]}, {**q, "question": "Third", "answer": " "}])  # fmt: skip
    found = question_problems(rows, "data.heldout", tmp_path / "h.jsonl")
    text = "\n".join(found)
    assert "1 of 4 items have an empty question or answer (lines 4)" in text
    assert "1 of 4 items accept an empty string (lines 3)" in text
    assert "every answer would count as right" in text
    assert "1 of 4 questions repeat an earlier one (lines 2)" in text


def test_a_held_out_question_also_trained_on_is_refused_with_both_lines(tmp_path) -> None:
    chats = _rows(tmp_path / "t.jsonl", [_chat("What is X?"), _chat("What is Y?")])
    questions = _rows(tmp_path / "h.jsonl", [
        {"question": "what is  y?", "answer": "y", "accept": ["y"]},
        {"question": "What is Z?", "answer": "z", "accept": ["z"]},
    ])  # fmt: skip
    problem = overlap_problem(questions, chats, ("data.heldout", "data.train"),
                              (tmp_path / "h.jsonl", tmp_path / "t.jsonl"))  # fmt: skip
    assert problem is not None
    assert "1 of 2 questions (lines 1) are also asked in data.train" in problem
    assert "(lines 2)" in problem and "would not be held out" in problem
    assert overlap_problem(questions[1:], chats, ("a", "b"), (Path("h"), Path("t"))) is None


def test_a_null_turn_or_answer_is_refused_by_the_readers_themselves(tmp_path) -> None:
    """The readers turned a null into the text "None" (and a string of accepted answers into
    its letters, each matching)."""
    from quantbench.errors import UserError
    from quantbench.lora.data import load_chats
    from quantbench.qa import load_qa

    train = tmp_path / "t.jsonl"
    train.write_text(json.dumps(_chat("q", None)) + "\n")  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"t\.jsonl:1: message 1's content is None, not text"):
        load_chats(train)
    heldout = tmp_path / "h.jsonl"
    for row, what in (({"question": None, "answer": "a", "accept": ["a"]}, "not text"),
                      ({"question": "q", "answer": "a", "accept": "abc"}, "not a list")):  # fmt: skip
        heldout.write_text(json.dumps(row) + "\n")
        with pytest.raises(ValueError, match=rf"h\.jsonl:1: .*{what}"):
            load_qa(heldout)
