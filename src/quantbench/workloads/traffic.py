"""A workload's traffic, materialized: the conversations (and, for a trace, the arrival times)
that every point of every bench stage sends, with a summary of what they are made of.

The `workloads` stage writes it to ``reports/workloads/<name>.jsonl`` (one conversation per line)
and ``<name>.json`` (the summary), so what was sent can be read, diffed and cached; ``quantbench
bench`` builds it in memory. Lengths are made to fit the context: turns whose prompt and answer
would not fit are dropped (and counted in the summary), never sent to fail.

With ``unique_prompts`` every conversation's first message holds the place of its unique marker
within its own length (:mod:`quantbench.workloads.marker`): what the file holds is what is sent,
token for token, but for the marker's digits.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from quantbench.errors import UserError
from quantbench.schemas import io as schema_io
from quantbench.schemas.io import MissingOutputError
from quantbench.schemas.workloads import TrafficLine, WorkloadSummary
from quantbench.workloads import stats
from quantbench.workloads.builtin import NAMED
from quantbench.workloads.files import read_conversations, read_trace
from quantbench.workloads.generate import Corpus, conversations
from quantbench.workloads.marker import Room
from quantbench.workloads.plan import Conversation, Turn
from quantbench.workloads.prompts import load_dataset, random_prompts
from quantbench.workloads.spec import (
    ConversationsFile,
    DatasetPrompts,
    RandomPrompts,
    TracePrompts,
    WorkloadSpec,
)


@dataclass
class Traffic:
    """What a workload sends: conversations, and arrival offsets when it replays a trace."""

    name: str
    conversations: list[Conversation]
    schedule: list[float] | None = None
    summary: WorkloadSummary | None = None
    """What it is made of (None: a traffic file whose summary is missing)."""
    notes: list[str] = field(default_factory=list)
    """Where its prompts miss the lengths asked, and by how much (made here, not written)."""

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{self.name}.jsonl", "w", encoding="utf-8") as out:
            for i, conv in enumerate(self.conversations):
                line = TrafficLine.model_validate(
                    {**asdict(conv), "arrival_s": self.schedule[i] if self.schedule else None}
                )
                out.write(json.dumps(line.model_dump(mode="json"), sort_keys=True) + "\n")
        if self.summary is not None:
            schema_io.write(folder / f"{self.name}.json", self.summary)

    @classmethod
    def read(cls, folder: Path, name: str) -> Traffic:
        """The workload's conversations (each line a :class:`TrafficLine`, older lines migrated;
        an unreadable one a StageOutputError naming its file and line) and summary."""
        path = folder / f"{name}.jsonl"
        if not path.is_file():
            raise MissingOutputError(
                f"{path} is missing: the workloads stage writes it (dvc repro workloads)"
            )
        convs: list[Conversation] = []
        schedule: list[float] = []
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            # a line without a version is version 0's, migrated
            line = schema_io.parse_text(text, TrafficLine, f"{path}:{number}", name=name)
            if line.arrival_s is not None:
                schedule.append(line.arrival_s)
            turns = [Turn(t.content, t.max_tokens, t.think_s) for t in line.turns]
            convs.append(
                Conversation(line.prompt_id, line.scenario, turns, line.system, line.raw_prompt)
            )
        summary_path = folder / f"{name}.json"
        summary = (
            schema_io.read(summary_path, WorkloadSummary, name=name)
            if summary_path.is_file()
            else None
        )
        return cls(name, convs, schedule or None, summary)


def _dataset(spec: DatasetPrompts, scenario: str) -> list[Conversation]:
    out = []
    for item in load_dataset(spec):
        messages = item.as_messages()
        system = next((m["content"] for m in messages if m.get("role") == "system"), None)
        users = [m for m in messages if m.get("role") == "user"]
        if not users:  # a completions-style line: the prompt is the one turn
            turns = [Turn(item.as_prompt(), item.max_tokens)]
            raw = item.prompt
        else:
            turns = [Turn(str(u["content"]), item.max_tokens) for u in users]
            raw = None
        out.append(
            Conversation(
                prompt_id=item.id,
                scenario=item.scenario or scenario,
                turns=turns,
                system=system,
                raw_prompt=raw,
            )
        )
    return out


def _random(
    spec: RandomPrompts, seed: int, cut: Callable[[str, int], str] | None
) -> list[Conversation]:
    return [
        Conversation(
            prompt_id=item.id, scenario="random", turns=[Turn(item.as_prompt(), item.max_tokens)]
        )
        for item in random_prompts(spec, seed, cut)
    ]


def materialize(
    spec: WorkloadSpec,
    corpus_files: Sequence[Path],
    *,
    count: Callable[[str], int] | None = None,
    cut: Callable[[str, int], str] | None = None,
    context: int | None = None,
) -> Traffic:
    """The traffic of ``spec``: generated, read from its file, or replayed from its trace.

    ``count``/``cut`` are the model tokenizer's token counter and cutter (words stand in without
    them); ``context`` is the tokens one request may hold (prompt and answer), the smallest of the
    model's and the engines' limits.
    """
    schedule = None
    source = spec.prompts
    provenance: str
    # the unique marker's room, within each first message's length (as the peers' prompts are)
    room = Room(count, cut) if spec.unique_prompts else None
    if spec.use is not None:
        named = NAMED[spec.use]
        corpus = Corpus(corpus_files, cut)
        convs = conversations(
            named.shape,
            spec.conversations,
            spec.seed,
            corpus,
            scenario=spec.name,
            length_scale=spec.length_scale,
            room=room,
        )
        if spec.think_scale != 1.0:
            from dataclasses import replace

            convs = [
                replace(
                    c, turns=[replace(t, think_s=t.think_s * spec.think_scale) for t in c.turns]
                )
                for c in convs
            ]
        provenance = named.source
    elif isinstance(source, DatasetPrompts):
        convs = _dataset(source, spec.name)
        provenance = f"prompts dataset {source.path}"
    elif isinstance(source, RandomPrompts):
        convs = _random(source, spec.seed, cut)
        provenance = "random prompts of common words"
    elif isinstance(source, ConversationsFile):
        convs = read_conversations(
            source.path, default_max_tokens=source.max_tokens, scenario=spec.name
        )
        provenance = f"conversations file {source.path}"
    elif isinstance(source, TracePrompts):
        corpus = Corpus(corpus_files, cut)
        convs, schedule = read_trace(
            source.path,
            corpus,
            scenario=spec.name,
            block_tokens=source.block_tokens,
            seed=spec.seed,
        )
        schedule = [t * source.time_scale for t in schedule]
        provenance = f"trace {source.path}"
    else:  # pragma: no cover - the settings allow nothing else
        raise AssertionError(source)
    if room is not None and spec.use is None:
        convs = [room.conversation(c) for c in convs]
    counter = count or stats.words
    dropped = 0
    if context is not None:
        kept, dropped = stats.fit_to_context(convs, counter, context)
        if schedule is not None:
            keep_ids = {c.prompt_id for c in kept}
            schedule = [t for c, t in zip(convs, schedule, strict=True) if c.prompt_id in keep_ids]
        convs = kept
    if not convs:
        raise UserError(
            f"workload {spec.name!r}: no request fits the context of {context} tokens; "
            "lower length_scale or the output lengths, or raise the context"
        )
    summary = stats.summarize(convs, counter, context).model_copy(
        update={"name": spec.name, "source": provenance, "turns_dropped_to_fit": dropped}
    )
    return Traffic(spec.name, convs, schedule, summary, room.notes() if room else [])


def shuffled(traffic: Traffic, seed: str) -> list[Conversation]:
    """The conversations in this point's and repeat's own order (a trace keeps its order)."""
    if traffic.schedule is not None:
        return list(traffic.conversations)
    out = list(traffic.conversations)
    random.Random(seed).shuffle(out)
    return out
