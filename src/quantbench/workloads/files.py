"""User workloads from files: conversations (OpenAI messages) and arrival traces.

**Conversations** (``source: conversations``), one JSON object per line::

    {"id": "c1", "messages": [
        {"role": "system", "content": "You are ..."},
        {"role": "user", "content": "First question", "max_tokens": 64},
        {"role": "assistant", "content": "(a reference answer: only its length is used)"},
        {"role": "user", "content": "Follow-up", "think_s": 4.0}
     ], "max_tokens": 128, "scenario": "support"}

Each user message is a turn. The server's own answers go into the history that later turns
resend (what a chat client does); an assistant message in the file only gives the preceding
turn's output length when the turn has no ``max_tokens`` of its own (words stand in for tokens).
``think_s`` is the pause before a turn. ``max_tokens`` on the line is the default for its turns.

**Traces** (``source: trace``), one request per line, in the field names of the Mooncake trace
(arXiv:2407.00079) that vLLM, GuideLLM and AIPerf also read::

    {"timestamp": 1250, "input_length": 812, "output_length": 64, "hash_ids": [7, 8]}

``timestamp`` is the arrival in milliseconds from the trace's start (or ``arrival_s`` in
seconds); the prompt is ``text`` when given, else made from the corpus: with ``hash_ids`` one
block of ``block_tokens`` tokens per id, the same id always the same text (so requests that share
ids share a prefix, as in the trace), then the rest up to ``input_length``. Requests replay at
their arrival times (an open loop).

Every line is checked; a bad one is an error naming the file, the line and what is wrong.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from quantbench.errors import UserError
from quantbench.textfile import read_utf8
from quantbench.workloads.generate import Corpus
from quantbench.workloads.plan import Conversation, Turn


class WorkloadFileError(UserError, ValueError):
    """A workload file that cannot be used, named by file and line."""


def json_object_lines(
    path: Path, key: str, error: type[Exception]
) -> list[tuple[str, dict[str, Any]]]:
    """(``file:line``, object) for each non-blank line of a JSON Lines file a person gave;
    ``error`` naming the file and line where one is not a JSON object (NotUtf8Error naming
    ``key`` where the file is not UTF-8). Lines end at newlines only: a JSON string may hold
    the other line separators ``str.splitlines`` cuts at (U+2028, U+0085) as they are."""
    rows = []
    for lineno, line in enumerate(read_utf8(path, key).split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise error(f"{where}: each line must be a JSON object, got {type(row).__name__}")
        rows.append((where, row))
    return rows


def _lines(path: Path) -> list[tuple[str, dict[str, Any]]]:
    if not Path(path).is_file():
        raise WorkloadFileError(f"workload file {path} does not exist")
    rows = json_object_lines(path, "workload file", WorkloadFileError)
    if not rows:
        raise WorkloadFileError(
            f"workload file {path} has no lines; give one JSON object a line (docs/LOAD.md)"
        )
    return rows


# More tokens than any model's context: a length past it is a typo, and making its prompt
# would take the machine's memory before any check could refuse it.
MAX_LENGTH = 1 << 24


def _positive_int(value: Any, where: str, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_LENGTH:
        raise WorkloadFileError(
            f"{where}: {what} must be a positive integer (at most {MAX_LENGTH:,}), got {value!r}"
        )
    return value


def _seconds(value: Any) -> bool:
    """Whether ``value`` is a number of seconds (or milliseconds) >= 0: finite, not a switch."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def read_conversations(
    path: Path, *, default_max_tokens: int | None, scenario: str
) -> list[Conversation]:
    out: list[Conversation] = []
    seen: set[str] = set()
    for n, (where, row) in enumerate(_lines(path)):
        messages = row.get("messages")
        if not isinstance(messages, list) or not messages:
            raise WorkloadFileError(f"{where}: 'messages' must be a non-empty list of messages")
        cid = str(row.get("id", f"{scenario}-{n:05d}"))
        if cid in seen:
            raise WorkloadFileError(f"{where}: id {cid!r} appears twice; ids must be unique")
        seen.add(cid)
        line_max = row.get("max_tokens", default_max_tokens)
        system = None
        turns: list[dict[str, Any]] = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
                raise WorkloadFileError(
                    f"{where}: message {i} must be an object with 'role' and 'content'"
                )
            role, content = msg["role"], msg["content"]
            if not isinstance(content, str) or (role == "user" and not content.strip()):
                raise WorkloadFileError(
                    f"{where}: message {i} content must be text (a user turn's not empty), "
                    f"got {content!r}"
                )
            if role == "system":
                if i != 0:
                    raise WorkloadFileError(f"{where}: a system message may only come first")
                system = content
            elif role == "user":
                think = msg.get("think_s", 0.0)
                if not _seconds(think):
                    raise WorkloadFileError(
                        f"{where}: message {i} think_s must be seconds >= 0, got {think!r}"
                    )
                turns.append({"content": content, "max": msg.get("max_tokens"), "think": think})
            elif role == "assistant":
                if not turns:
                    raise WorkloadFileError(f"{where}: an assistant message before any user one")
                if turns[-1]["max"] is None:
                    turns[-1]["max"] = max(1, len(content.split()))
            else:
                raise WorkloadFileError(
                    f"{where}: message {i} has role {role!r}; use system, user or assistant"
                )
        if not turns:
            raise WorkloadFileError(f"{where}: no user message")
        built = []
        for k, t in enumerate(turns):
            max_tokens = t["max"] if t["max"] is not None else line_max
            if max_tokens is None:
                raise WorkloadFileError(
                    f"{where}: turn {k} has no max_tokens (on the message, the line, or the "
                    "workload's prompts.max_tokens)"
                )
            _positive_int(max_tokens, where, f"turn {k} max_tokens")
            built.append(
                Turn(t["content"], int(max_tokens), think_s=float(t["think"]) if k else 0.0)
            )
        out.append(
            Conversation(
                prompt_id=cid,
                scenario=str(row.get("scenario", scenario)),
                turns=built,
                system=system,
            )
        )
    return out


def read_trace(
    path: Path, corpus: Corpus, *, scenario: str, block_tokens: int = 512, seed: int = 0
) -> tuple[list[Conversation], list[float]]:
    """The trace's requests (one-turn conversations) and their arrival offsets in seconds."""
    rows = _lines(path)
    arrivals: list[float] = []
    out: list[Conversation] = []
    blocks: dict[Any, str] = {}
    rng = random.Random(seed)
    for n, (where, row) in enumerate(rows):
        if "timestamp" in row:
            stamp = row["timestamp"]
            if not _seconds(stamp):
                raise WorkloadFileError(f"{where}: timestamp must be milliseconds >= 0")
            at = float(stamp) / 1000.0
        elif "arrival_s" in row:
            at = row["arrival_s"]
            if not _seconds(at):
                raise WorkloadFileError(f"{where}: arrival_s must be seconds >= 0")
            at = float(at)
        else:
            raise WorkloadFileError(
                f"{where}: needs 'timestamp' (ms) or 'arrival_s' (s); give the request's arrival"
            )
        if arrivals and at < arrivals[-1]:
            raise WorkloadFileError(
                f"{where}: arrivals must not go back in time ({at:g} s after {arrivals[-1]:g} s)"
            )
        output = _positive_int(row.get("output_length"), where, "output_length")
        text = row.get("text", row.get("prompt"))
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise WorkloadFileError(f"{where}: text must be a non-empty string, got {text!r}")
        if text is None:
            n_in = _positive_int(row.get("input_length"), where, "input_length")
            ids = row.get("hash_ids") or []
            if not isinstance(ids, list) or not all(
                isinstance(h, int | str) and not isinstance(h, bool) for h in ids
            ):
                raise WorkloadFileError(
                    f"{where}: hash_ids must be a list of block ids (integers or strings), got "
                    f"{ids!r}"
                )
            _positive_int(block_tokens * max(1, len(ids)), where, "hash_ids x block_tokens")
            parts = []
            for hid in ids:
                if hid not in blocks:
                    blocks[hid] = corpus.text(block_tokens, random.Random(f"{seed}-{hid}"))
                parts.append(blocks[hid])
            used = block_tokens * len(parts)
            if n_in > used:
                parts.append(corpus.text(n_in - used, rng))
            text = " ".join(parts)
        arrivals.append(at)
        out.append(
            Conversation(
                prompt_id=str(row.get("id", f"{scenario}-{n:05d}")),
                scenario=scenario,
                turns=[Turn(text, output)],
            )
        )
    start = arrivals[0]
    return out, [a - start for a in arrivals]
