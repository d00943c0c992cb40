"""Prompts are the length asked, as the peers send them: the server's own count of each
request's prompt (``usage.prompt_tokens``) is the asked length plus what the chat template adds,
exactly, the unique marker within the asked length (issue 59: it was 10-11 tokens on top, 168-169
tokens served for 128 asked where AIPerf's were 158).

Against the scripted server counting with the model's tokenizer and chat template, and against a
real llama-server on the embedded GGUF, counting with its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quantbench.load.records import read_records
from quantbench.load.session import DEFAULT_CORPUS, Target, run_session
from quantbench.load.tokens import TokenCounter, load_counter
from quantbench.mock_server import Behaviour, MockServerProcess, Script
from quantbench.workloads.prompts import PromptItem
from quantbench.workloads.spec import WorkloadSpec
from quantbench.workloads.traffic import materialize

INPUT_LEN = 128
POINT: dict[str, Any] = {
    "load": [{"kind": "concurrency", "concurrency": 2}],
    "num_requests": 6,
    "progress_interval_s": 30,
}
# what a dataset's user messages are like: prose, a list, digits, punctuation, accents
DATASET_TEXTS = [
    "Summarise the plot of Hamlet in three sentences, naming the main characters.",
    "List five uses of a paperclip:\n1. holding paper\n2.",
    "What is 1234 + 5678? Show the steps.",
    "Translate into French: « the café's naïve façade »",
    "Explain why the sky is blue to a child of six, in plain words and short sentences.",
    "Write a haiku about rain on a tin roof.",
]


def _dataset(folder: Path) -> Path:
    path = folder / "prompts.jsonl"
    rows = [
        {"id": f"d{i}", "messages": [{"role": "user", "content": t}], "max_tokens": 2}
        for i, t in enumerate(DATASET_TEXTS)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _workloads(folder: Path) -> dict[str, WorkloadSpec]:
    raw: dict[str, dict[str, Any]] = {
        "random": {
            "prompts": {"source": "random", "input_len": INPUT_LEN, "output_len": 2},
            "fixed_output_length": True,
        },
        "dataset": {"prompts": {"source": "dataset", "path": str(_dataset(folder))}},
        # first turns of ~14 tokens behind the shared system prompt, no pauses between turns
        "multi-turn": {"use": "multi-turn", "length_scale": 0.2, "think_scale": 0.0,
                       "conversations": 16},
    }  # fmt: skip
    return {name: WorkloadSpec.model_validate({**w, **POINT}) for name, w in raw.items()}


def _template(counter: TokenCounter, system: str | None) -> int:
    """What the chat template (and a system message, sent on top) adds to one user message."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    messages.append({"role": "user", "content": "x"})
    item = PromptItem(id="t", max_tokens=1, messages=messages)
    return counter.count_prompt(item, "chat") - counter.count_text("x")


def _expected(spec: WorkloadSpec, counter: TokenCounter) -> dict[str, int]:
    """Per conversation, its first request's prompt as the server must count it: the length its
    first message was asked to have (the traffic made without the marker, cut with the same
    tokenizer: a dataset's own text) plus the template's tokens."""
    plain = materialize(spec.model_copy(update={"unique_prompts": False}), DEFAULT_CORPUS,
                        count=counter.count_text, cut=counter.cut)  # fmt: skip
    asked = {c.prompt_id: counter.count_text(c.turns[0].content) for c in plain.conversations}
    if spec.prompts is not None and spec.prompts.source == "random":
        assert set(asked.values()) == {INPUT_LEN}  # the asked length itself
    if spec.prompts is not None and spec.prompts.source == "dataset":
        assert sorted(asked.values()) == sorted(counter.count_text(t) for t in DATASET_TEXTS)
    return {c.prompt_id: asked[c.prompt_id] + _template(counter, c.system)
            for c in plain.conversations}  # fmt: skip


def _served_prompts(spec: WorkloadSpec, target: Target, out: Path) -> list[tuple[str, int | None]]:
    """(conversation, the server's usage.prompt_tokens) of every first request it answered."""
    run_session(spec, target, out)
    records = read_records(out / "records.jsonl")
    firsts = [r for r in records if r.turn == 0 and r.status == "completed"]
    assert len(firsts) >= 6, [(r.status, r.error) for r in records]
    return [(r.prompt_id, r.prompt_tokens) for r in firsts]


def _check_every_workload(url: str, engine: str, tokenizer: Path, folder: Path) -> None:
    counter = load_counter(tokenizer)
    target = Target(url=url, engine=engine, tokenizer=str(tokenizer))
    off: dict[str, list[tuple[str, int | None, int]]] = {}
    for name, spec in _workloads(folder).items():
        expected = _expected(spec, counter)
        served = _served_prompts(spec, target, folder / name)
        print(f"{name}: prompt tokens served {[n for _, n in served]}")
        off[name] = [(pid, n, expected[pid]) for pid, n in served if n != expected[pid]]
    assert not any(off.values()), off  # (conversation, served, asked + template)


@pytest.fixture
def counting_server(tmp_path: Path, tiny_model_dir: Path) -> Iterator[MockServerProcess]:
    """The scripted server, counting each prompt with the model's tokenizer and chat template
    as an engine does."""
    script = Script(behaviours=[Behaviour(output_tokens=2)], tokenizer=str(tiny_model_dir))
    server = MockServerProcess(script, tmp_path / "server")
    server.start(timeout_s=120)  # it loads transformers before it listens
    try:
        yield server
    finally:
        server.stop()


def test_the_scripted_server_counts_the_asked_length_plus_the_template(
    counting_server: MockServerProcess, tiny_model_dir: Path, tmp_path: Path
) -> None:
    _check_every_workload(counting_server.url, "mock", tiny_model_dir, tmp_path)
    # the server's log holds the same counts it answered with
    assert all(isinstance(t["prompt_tokens"], int) for t in counting_server.truth())


@pytest.mark.server
@pytest.mark.slow
def test_llama_server_counts_the_asked_length_plus_the_template(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # llama-server tokenizes with the GGUF's own vocabulary and chat template, which the tiny
    # model's folder holds too (the embedded model's tokenizer, read from that GGUF)
    from quantbench.engines.artifact import load_artifact
    from quantbench.engines.llamacpp import LlamaCppSettings
    from quantbench.engines.registry import get_engine
    from quantbench.engines.server import Server
    from quantbench.model import embedded_gguf_path
    from quantbench.ports import free_port

    artifact = load_artifact(embedded_gguf_path())
    launch = get_engine("llamacpp").launch(artifact, LlamaCppSettings(), "127.0.0.1", free_port())
    with Server(launch, tmp_path / "server.log") as server:
        server.warmup()
        _check_every_workload(server.url, "llamacpp", tiny_model_dir, tmp_path)
