"""Held-out question answering: did the model learn (and keep) the fine-tune's knowledge?

Each item is a question asked as a single user chat turn and a list of accepted strings; the answer
counts as correct if any accepted string appears in it, case-insensitively. Keyword matching is crude
but transparent, deterministic and cheap; the questions are written so that one short fact answers
each, and the accepted strings are specific enough (fictional names and numbers) that a model which
never learned them does not hit them by chance.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from quantbench.textfile import read_utf8


@dataclass(frozen=True)
class QAItem:
    """One held-out question and what counts as a right answer."""

    question: str
    answer: str
    accept: tuple[str, ...]

    def is_correct(self, text: str) -> bool:
        lowered = text.lower()
        return any(a.lower() in lowered for a in self.accept)


def load_qa(path: str | Path) -> list[QAItem]:
    """Read a held-out JSONL file ({"question", "answer", "accept": [...]}) with line-exact errors."""
    items: list[QAItem] = []
    for lineno, line in enumerate(read_utf8(path, "held-out questions").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            # a null would be judged as the text "None": each field must be text itself
            if not isinstance(row["accept"], list):  # a string's letters would each match
                raise ValueError(f"'accept' is {row['accept']!r}, not a list of strings")
            texts = [row["question"], row["answer"], *row["accept"]]
            if not all(isinstance(t, str) for t in texts):
                raise ValueError(f"a question, answer or accept string is not text: {texts!r}")
            accept = tuple(row["accept"])
            if not accept:
                raise ValueError("'accept' is empty")
            items.append(QAItem(row["question"], row["answer"], accept))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{path}:{lineno}: expected a JSON object with 'question', 'answer' and a non-empty "
                f"'accept' list ({exc})"
            ) from exc
    if not items:
        raise ValueError(f"{path}: no questions found")
    return items


@dataclass(frozen=True)
class QAResult:
    """Accuracy over a question set, with every answer kept so a reader can check the judging."""

    correct: int
    total: int
    answers: list[dict[str, object]]

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "accuracy": self.accuracy,
            "correct": self.correct,
            "total": self.total,
            "answers": self.answers,
        }


def score(items: Sequence[QAItem], answers_fn: Callable[[list[str]], list[str]]) -> QAResult:
    """Ask every question through `answers_fn` (questions -> generated texts, in order: a batch
    at a time where the model can) and judge the answers."""
    texts = answers_fn([item.question for item in items])
    if len(texts) != len(items):
        raise ValueError(f"{len(items)} questions asked, {len(texts)} answers returned")
    answers: list[dict[str, object]] = []
    correct = 0
    for item, text in zip(items, texts, strict=True):
        ok = item.is_correct(text)
        correct += ok
        answers.append({"question": item.question, "expected": item.answer, "got": text, "ok": ok})
    return QAResult(correct=correct, total=len(items), answers=answers)
