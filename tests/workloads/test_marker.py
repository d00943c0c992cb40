"""The unique marker: within each first message's length for every source, written over its
placeholder at send time with the same tokens whatever its digits, and said where it cannot be."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from quantbench.load.tokens import TokenCounter, load_counter
from quantbench.workloads.marker import PLACEHOLDER, Room, marker_digits, stamp
from quantbench.workloads.prompts import PromptItem
from quantbench.workloads.spec import WorkloadSpec
from quantbench.workloads.traffic import materialize

REPO = Path(__file__).resolve().parents[2]
CORPUS = [REPO / "data/calibration.txt", REPO / "data/eval.txt"]
TEXTS = [
    "Summarise the following text.\nDerivative Works that You distribute must include",
    "the of and to in is that for it as was with be by on not he this are or his",
    "What is 1234 + 5678? Show the steps.\n\n1. add the units\n2.",
    "Translate into French: « the café's naïve façade »",
]


@pytest.fixture(scope="module")
def counter(tiny_model_dir: Path) -> TokenCounter:
    return load_counter(tiny_model_dir)


def _served(counter: TokenCounter, content: str) -> int:
    item = PromptItem(id="p", max_tokens=1, messages=[{"role": "user", "content": content}])
    return counter.count_prompt(item, "chat")


def test_the_marker_takes_the_place_of_the_last_tokens(counter: TokenCounter) -> None:
    room = Room(counter.count_text, counter.cut)
    for text in TEXTS:
        roomy = room(text)
        assert roomy.startswith(f"{PLACEHOLDER} ")
        assert counter.count_text(roomy) == counter.count_text(text), roomy
        # whatever digits the load process writes over the placeholder, the server counts
        # the message as the text alone: its tokens, the chat template's on top
        for digits in ("0000", "9999", "0917", marker_digits("c4-r0-", 17)):
            sent = stamp(roomy, digits)
            assert sent.startswith(f"{digits} ") and sent[4:] == roomy[4:]
            assert _served(counter, sent) == _served(counter, text), sent
    assert room.notes() == []  # every length met
    # every marker the load process can write: the same tokens as the placeholder
    roomy = room(TEXTS[1])
    assert {counter.count_text(stamp(roomy, f"{d:04d}")) for d in range(10_000)} == {
        counter.count_text(TEXTS[1])
    }


def test_a_message_shorter_than_the_marker_is_the_marker_alone_and_said(
    counter: TokenCounter,
) -> None:
    room = Room(counter.count_text, counter.cut)
    assert room("on the") == PLACEHOLDER  # 2 tokens asked, the marker's 4 sent
    assert room("the of and to in is") == f"{PLACEHOLDER} the of"
    (note,) = room.notes()
    assert note.startswith("1 of 2 first messages are shorter than the unique marker")
    assert "2-2 tokens longer than asked" in note


def test_a_tokenizer_whose_marker_length_varies_is_said() -> None:
    # a tokenizer that merges a run of one digit into one token: 0000 is 1 token, 0917 is 4
    def tokens(text: str) -> list[str]:
        return [m.group(0) for m in re.finditer(r"(\d)\1*|[^\d\s]+", text)]

    room = Room(lambda text: len(tokens(text)), lambda text, n: " ".join(tokens(text)[:n]))
    assert room("a b c d e") == f"{PLACEHOLDER} a b c d"
    assert room.notes() == [
        "the unique marker takes 1-4 tokens with this tokenizer where its placeholder takes 1: "
        "a first message may be up to 3 tokens off its length (unique_prompts: false sends "
        "prompts without it)"
    ]


def test_markers_differ_within_a_point_and_between_points() -> None:
    digits = [marker_digits("c4-r0-", i) for i in range(10_000)]
    assert len(set(digits)) == 10_000 and all(re.fullmatch(r"\d{4}", d) for d in digits)
    assert marker_digits("c4-r0-", 0) != marker_digits("c4-r1-", 0)
    assert marker_digits("c4-r0-", 0) != marker_digits("c16-r0-", 0)
    # a traffic made without room for the marker gets it on top, as before
    assert stamp("hello", "0917") == "0917 hello"


def _specs(tmp_path: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"d{i}", "prompt" if i % 2 else "messages": (
        t if i % 2 else [{"role": "user", "content": t}]), "max_tokens": 4}) + "\n"
        for i, t in enumerate(TEXTS)), encoding="utf-8")  # fmt: skip
    convs = tmp_path / "convs.jsonl"
    convs.write_text(json.dumps({"id": "c", "max_tokens": 4, "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": TEXTS[0]},
        {"role": "user", "content": TEXTS[1]}]}) + "\n", encoding="utf-8")  # fmt: skip
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in [
        {"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1]},
        {"timestamp": 500, "input_length": 24, "output_length": 4},
        {"timestamp": 900, "text": TEXTS[2], "output_length": 4}]), encoding="utf-8")  # fmt: skip
    return {
        "random": {"prompts": {"source": "random", "input_len": 48, "output_len": 4}},
        "dataset": {"prompts": {"source": "dataset", "path": str(dataset)}},
        "conversations": {"prompts": {"source": "conversations", "path": str(convs)}},
        "trace": {"prompts": {"source": "trace", "path": str(trace), "block_tokens": 16}},
        **{name: {"use": name, "conversations": 24} for name in ("chat", "rag", "multi-turn",
                                                                 "long-generation")},
    }  # fmt: skip


def test_every_source_sends_its_lengths_with_the_marker_inside(
    counter: TokenCounter, tmp_path: Path
) -> None:
    for name, raw in _specs(tmp_path).items():
        spec = WorkloadSpec.model_validate(
            {**raw, "num_requests": 2, "load": [{"kind": "concurrency", "concurrency": 1}]}
        )
        made = {}
        for unique in (True, False):
            made[unique] = materialize(
                spec.model_copy(update={"unique_prompts": unique}), CORPUS,
                count=counter.count_text, cut=counter.cut, context=4096,
            )  # fmt: skip
        on, off = made[True], made[False]
        missed = 0
        for a, b in zip(on.conversations, off.conversations, strict=True):
            assert a.turns[0].content.startswith(f"{PLACEHOLDER} "), (name, a.turns[0].content)
            assert a.turns[1:] == b.turns[1:] and a.system == b.system  # later turns as asked
            if a.raw_prompt is not None:
                assert a.raw_prompt == a.turns[0].content
            missed += counter.count_text(a.turns[0].content) != counter.count_text(
                b.turns[0].content
            )
        # every miss is said, with its count (a RAG document cut before a digit: 0 of 24 here)
        assert (missed == 0) == (on.notes == []), (name, missed, on.notes)
        if missed:
            assert any(n.startswith(f"{missed} of ") for n in on.notes), (name, on.notes)
        assert on.summary is not None and off.summary is not None
        assert on.summary.input_tokens == off.summary.input_tokens or missed, name
        if name == "random":  # the asked length itself, the marker in it
            assert {counter.count_text(c.turns[0].content) for c in on.conversations} == {48}
        assert off.notes == [] and not off.conversations[0].turns[0].content.startswith(PLACEHOLDER)


def test_without_a_tokenizer_the_marker_is_a_word_of_the_length() -> None:
    spec = WorkloadSpec.model_validate({
        "prompts": {"source": "random", "input_len": 8, "output_len": 4}, "num_requests": 2,
        "load": [{"kind": "concurrency", "concurrency": 1}]})  # fmt: skip
    traffic = materialize(spec, CORPUS)
    assert {len(c.turns[0].content.split()) for c in traffic.conversations} == {8}
    assert all(c.turns[0].content.startswith(f"{PLACEHOLDER} ") for c in traffic.conversations)
