"""The data files the pipeline reads, as params.yaml's `data:` section names them.

Each stage that reads one of these files checks it first (it exists, it is a regular file, it
is UTF-8, it holds something), so a missing or blank file is an error that names the key and the
path before any work, not a traceback minutes later. The files with a structure (the training
chats, the held-out questions) are also read whole by their own reader before any work
(:func:`quantbench.preflight.data_problems`): a bad line is refused with its number.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from pydantic import Field

from quantbench.errors import UserError, shown
from quantbench.settings import Settings
from quantbench.textfile import read_utf8


class DataFileError(UserError):
    """A data file params.yaml names is missing or empty."""


class DataSettings(Settings):
    train: Path = Field(Path("data/train.jsonl"), description="LoRA training chats (JSONL).")
    heldout: Path = Field(Path("data/heldout.jsonl"), description="Held-out questions (JSONL).")
    calibration: Path = Field(Path("data/calibration.txt"), description="Quantizer calibration.")
    eval: Path = Field(Path("data/eval.txt"), description="Perplexity/KL evaluation text.")
    corpus: list[Path] = Field(
        [Path("data/calibration.txt"), Path("data/eval.txt")],
        min_length=1,
        description="Text the named workloads cut their prompts from (no download: the "
        "project's own files).",
    )


def path_problem(path: Path, key: str) -> str | None:
    """Why ``path`` is not a regular file the run can read, naming ``key``: missing, a folder,
    a named pipe (reading one waits for a writer), a device or a socket; None where it is one."""
    path = Path(path)
    where = f"{key}: {shown(path)}"
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return (
            f"{where} does not exist; give an existing file (paths are relative to the "
            "repository root)"
        )
    except OSError as exc:
        return f"{where} cannot be read ({exc.strerror}); give a file this user can read"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        inside = sorted(p.name for p in path.iterdir() if p.is_file())[:3]
        hint = f" (it holds {', '.join(shown(n) for n in inside)})" if inside else ""
        return f"{where} is a folder{hint}; give the file itself"
    kind = "a named pipe" if stat.S_ISFIFO(mode) else "a device or a socket"
    return (
        f"{where} is {kind}, not a file: its content would not be the same on the next run; "
        "give a regular file"
    )


def check_data_file(path: Path, key: str) -> Path:
    """``path`` if it is a UTF-8 file with something in it; an error naming ``key`` otherwise."""
    path = Path(path)
    problem = path_problem(path, key)
    if problem:
        raise DataFileError(problem)
    if not read_utf8(path, key).strip():
        raise DataFileError(
            f"{key}: {shown(path)} is empty (or only whitespace); give a file with content"
        )
    return path


def outside_project(path: Path, key: str, project: Path) -> str | None:
    """What a data file outside ``project`` costs (None inside): another clone of the
    repository lacks it, so the run could not be reproduced from the repository."""
    try:
        Path(path).resolve().relative_to(project.resolve())
    except ValueError:
        return (
            f"{key}: {shown(path)} is outside the project ({shown(project)}): another clone "
            "of the repository lacks it, so the run cannot be reproduced from it; to make it "
            "reproducible, copy the file into the project (e.g. data/) and point the key there"
        )
    return None


# --- what a data file holds: items that parse but are wrong ----------------------------------


def jsonl_rows(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed JSON) of each non-blank line that parses (the file's own reader
    refuses the others, with their numbers, before these checks run)."""
    rows = []
    for lineno, line in enumerate(read_utf8(path, str(path)).splitlines(), 1):
        if line.strip():
            try:
                rows.append((lineno, json.loads(line)))
            except ValueError:
                continue
    return rows


def _lines(numbers: list[int]) -> str:
    """Line numbers for a message: the first ten, then how many more."""
    head = ", ".join(str(n) for n in numbers[:10])
    return head + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")


def _normal(text: str) -> str:
    """A text compared as a reader would: case and runs of whitespace ignored."""
    return " ".join(text.casefold().split())


def _repeats(keyed: list[tuple[int, str]]) -> list[int]:
    """The line numbers whose key an earlier line already has."""
    seen: set[str] = set()
    again = []
    for lineno, key in keyed:
        if key in seen:
            again.append(lineno)
        seen.add(key)
    return again


def chat_problems(rows: list[tuple[int, Any]], key: str, path: Path) -> list[str]:
    """Training chats that parse but teach nothing or teach twice: a turn whose content is
    empty, and a chat that repeats an earlier one (it weighs twice in the loss)."""
    found = []
    chats = [(n, r["messages"]) for n, r in rows if isinstance(r, dict) and "messages" in r]
    empty = [
        n
        for n, messages in chats
        if any(isinstance(m, dict) and isinstance(m.get("content"), str) and not
               m["content"].strip() for m in messages)
    ]  # fmt: skip
    where = f"{key}: {shown(path)}"
    if empty:
        found.append(
            f"{where}: {len(empty)} of {len(chats)} chats hold a turn with empty content (lines "
            f"{_lines(empty)}); write the turn's text or remove the chat"
        )
    twice = _repeats([(n, json.dumps(m, sort_keys=True)) for n, m in chats])
    if twice:
        found.append(
            f"{where}: {len(twice)} of {len(chats)} chats repeat an earlier chat (lines "
            f"{_lines(twice)}): each would weigh twice in training; remove the repeats"
        )
    return found


def question_problems(rows: list[tuple[int, Any]], key: str, path: Path) -> list[str]:
    """Held-out questions that parse but cannot be judged: an empty question or answer, an
    empty accept string (every answer holds it, so every answer would count as right), and a
    question asked twice (it would count twice in the accuracy)."""
    found = []
    items = [(n, r) for n, r in rows if isinstance(r, dict)]
    where = f"{key}: {shown(path)}"

    def blank(value: Any) -> bool:
        return isinstance(value, str) and not value.strip()

    empty = [n for n, r in items if blank(r.get("question")) or blank(r.get("answer"))]
    if empty:
        found.append(
            f"{where}: {len(empty)} of {len(items)} items have an empty question or answer "
            f"(lines {_lines(empty)}); write them or remove the items"
        )
    matches_all = [
        n for n, r in items if isinstance(r.get("accept"), list) and any(
            blank(a) for a in r["accept"])
    ]  # fmt: skip
    if matches_all:
        found.append(
            f"{where}: {len(matches_all)} of {len(items)} items accept an empty string (lines "
            f"{_lines(matches_all)}), which every answer holds, so every answer would count as "
            "right; remove the empty accept strings"
        )
    twice = _repeats(
        [(n, _normal(r["question"])) for n, r in items if isinstance(r.get("question"), str)]
    )
    if twice:
        found.append(
            f"{where}: {len(twice)} of {len(items)} questions repeat an earlier one (lines "
            f"{_lines(twice)}): each would count twice in the accuracy; remove the repeats"
        )
    return found


def overlap_problem(
    questions: list[tuple[int, Any]],
    chats: list[tuple[int, Any]],
    keys: tuple[str, str],
    paths: tuple[Path, Path],
) -> str | None:
    """Held-out questions that are also a user turn of the training chats: the fine-tune's
    score on them is not held out (it measures recall of the training data)."""
    trained: dict[str, int] = {}
    for lineno, row in chats:
        for m in row.get("messages", []) if isinstance(row, dict) else []:
            if (
                isinstance(m, dict)
                and m.get("role") == "user"
                and isinstance(m.get("content"), str)
            ):
                trained.setdefault(_normal(m["content"]), lineno)
    both = [
        (n, trained[_normal(r["question"])])
        for n, r in questions
        if isinstance(r, dict)
        and isinstance(r.get("question"), str)
        and _normal(r["question"]) in trained
    ]
    if not both:
        return None
    (heldout, train), (heldout_path, train_path) = keys, paths
    return (
        f"{heldout}: {shown(heldout_path)}: {len(both)} of {len(questions)} questions (lines "
        f"{_lines([n for n, _ in both])}) are also asked in {train}, {shown(train_path)} (lines "
        f"{_lines(sorted({t for _, t in both}))}): the fine-tune's held-out score would not be "
        f"held out; remove them from one of the two files"
    )
