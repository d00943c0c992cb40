"""The fine-tune's shipped task is what tools/make_task_data.py writes, held out for real."""

from __future__ import annotations

import json
import math
from pathlib import Path

from quantbench.qa import load_qa
from tools import make_task_data

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_files_are_what_the_script_writes() -> None:
    assert make_task_data.main(["--check"]) == 0
    for path, text in make_task_data.render().items():
        assert path.read_text() == text, path


def test_the_heldout_set_is_big_and_disjoint_from_training() -> None:
    chats = [json.loads(line) for line in (REPO / "data/train.jsonl").read_text().splitlines()]
    trained = " ".join(m["content"] for chat in chats for m in chat["messages"])
    items = load_qa(REPO / "data/heldout.jsonl")
    # hundreds of questions: a 95 % Wilson interval of at most about +-5 points at 80 % right
    assert len(items) >= 250 and 1.96 * math.sqrt(0.8 * 0.2 / len(items)) < 0.05
    asked = {chat["messages"][0]["content"] for chat in chats}
    assert not asked & {i.question for i in items}
    codes = [i for i in items if i.answer.startswith("The ticket code is")]
    assert len(codes) == make_task_data.HELDOUT_CODES
    for item in codes:
        (code,) = item.accept
        surname, seat, day = code.split("-")
        # the passenger is new: their surname is in no training chat, so the code is written
        # from the question, not recalled
        assert surname in item.question and surname not in trained, item
        assert seat in item.question and any(d.startswith(day) for d in make_task_data.DAYS)
        assert code in item.answer
    # half asked in a form of words training never used
    unseen = [
        i for i in codes
        if not any(_same_form(i.question, p) for p in make_task_data.TRAIN_PHRASINGS)
    ]  # fmt: skip
    assert len(unseen) == make_task_data.HELDOUT_CODES // 2


def _same_form(question: str, phrasing: str) -> bool:
    head = phrasing.split("{")[0]
    tail = phrasing.rsplit("}", 1)[-1]
    return question.startswith(head) and question.endswith(tail)
