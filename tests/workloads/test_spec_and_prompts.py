"""Workload validation, prompt sources and request bodies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from quantbench.engines.registry import get_engine
from quantbench.load.profiles import get_profile
from quantbench.load.requests import build_body
from quantbench.workloads.prompts import (
    DatasetError,
    PromptItem,
    load_dataset,
    ordered,
    random_prompts,
)
from quantbench.workloads.spec import DatasetPrompts, RandomPrompts, WorkloadSpec

RANDOM = {"source": "random", "input_len": 8, "output_len": 6}


def spec(**kw: object) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"prompts": RANDOM, **kw})


def test_points_labels_and_sizes() -> None:
    s = spec(
        load=[
            {"kind": "concurrency", "concurrency": 4},
            {"kind": "rate", "rate": 2.5, "burstiness": 0.5, "max_concurrency": 8,
             "num_requests": 7},
        ],
        num_requests=20,
    )  # fmt: skip
    assert [s.point_label(i) for i in range(2)] == ["c4", "r2.5-b0.5-max8"]
    assert s.point_size(0) == (20, None) and s.point_size(1) == (7, None)
    assert (
        spec(load={"kind": "concurrency", "concurrency": 1}, duration_s=3).load[0].concurrency == 1
    )


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"load": [{"kind": "concurrency", "concurrency": 2}]}, "has no size"),
        ({"load": [{"kind": "concurrency", "concurrency": 1}], "num_requests": 5, "workers": 2},
         "needs at least one stream"),
        ({"load": [{"kind": "concurrency", "concurrency": 2}] * 2, "num_requests": 5},
         "distinct labels"),
        # issue 14, item 1: c=16 with 8 requests peaked at 9 in flight and was reported as 16
        ({"load": [{"kind": "concurrency", "concurrency": 16}], "num_requests": 8},
         "set num_requests to at least 16"),
        ({"load": [{"kind": "concurrency", "concurrency": 0}], "num_requests": 5}, "greater than 0"),
        ({"load": [{"kind": "rate", "rate": 1, "burstines": 2}], "num_requests": 5}, "burstines"),
        ({"load": [{"kind": "steps"}], "num_requests": 5}, "does not match any of the expected tags"),
        ({"load": [{"kind": "rate", "rate": 1}], "num_requests": 5, "percentiles": [50, 100]},
         "strictly between 0 and 100"),
    ],
)  # fmt: skip
def test_bad_workloads_say_what_is_wrong(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(**kw)


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_dataset_lines(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "d.jsonl",
        [{"id": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
         {"id": "b", "prompt": "once upon", "scenario": "story", "lang": "en"}],
    )  # fmt: skip
    items = load_dataset(DatasetPrompts(path=path, max_tokens=9))
    assert [(i.id, i.max_tokens, i.scenario) for i in items] == [("a", 3, None), ("b", 9, "story")]
    assert items[1].meta == {"lang": "en"}
    assert items[0].as_prompt() == "hi"
    assert items[1].as_messages() == [{"role": "user", "content": "once upon"}]
    forced = load_dataset(DatasetPrompts(path=path, max_tokens=5, override_max_tokens=True))
    assert [i.max_tokens for i in forced] == [5, 5]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}], "d.jsonl:1: missing 'id'"),
        ([{"id": 1, "max_tokens": 1}], "exactly one of 'messages'"),
        ([{"id": 1, "messages": "hi", "max_tokens": 1}], "non-empty list"),
        ([{"id": 1, "prompt": "x"}], "no 'max_tokens'"),
        ([{"id": 1, "prompt": "x", "max_tokens": 0}], "positive integer"),
        ([{"id": 1, "prompt": "x", "max_tokens": 1}, {"id": 1, "prompt": "y", "max_tokens": 1}],
         "d.jsonl:2: id '1' appears twice"),
        ([[1, 2]], "must be a JSON object"),
    ],
)  # fmt: skip
def test_dataset_errors_name_file_and_line(
    tmp_path: Path, rows: list[object], message: str
) -> None:
    path = _write(tmp_path / "d.jsonl", rows)
    with pytest.raises(DatasetError, match=message):
        load_dataset(DatasetPrompts(path=path))


def test_dataset_bad_json_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"id": 1,\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: not valid JSON"):
        load_dataset(DatasetPrompts(path=tmp_path / "bad.jsonl"))
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(DatasetPrompts(path=tmp_path / "nope.jsonl"))


def test_random_prompts_lengths_and_determinism() -> None:
    fixed = random_prompts(RandomPrompts(input_len=12, output_len=5, num_prompts=20), seed=1)
    assert all(len(i.prompt.split()) == 12 and i.max_tokens == 5 for i in fixed)
    assert len({i.prompt for i in fixed}) == 20
    assert fixed == random_prompts(RandomPrompts(input_len=12, output_len=5, num_prompts=20), 1)
    spread = random_prompts(
        RandomPrompts(input_len=100, output_len=50, range_ratio=0.5, num_prompts=200), seed=2
    )
    ins = [len(i.prompt.split()) for i in spread]
    outs = [i.max_tokens for i in spread]
    assert 50 <= min(ins) < 70 and 130 < max(ins) <= 150
    assert min(outs) >= 25 and max(outs) <= 75
    cut = random_prompts(
        RandomPrompts(input_len=4, output_len=1, num_prompts=3),
        0,
        lambda t, n: " ".join(t.split()[:n]),
    )
    assert all(len(i.prompt.split()) == 4 for i in cut)


def test_ordered_shuffles_by_seed() -> None:
    items = [PromptItem(id=str(i), max_tokens=1, prompt="x") for i in range(30)]
    assert ordered(items, 0, shuffle=False) == items
    a, b = ordered(items, 0, shuffle=True), ordered(items, 1, shuffle=True)
    assert a == ordered(items, 0, shuffle=True) and a != items and a != b
    assert sorted(x.id for x in a) == sorted(x.id for x in items)


ITEM = PromptItem(id="a", max_tokens=7, messages=[{"role": "user", "content": "hi there"}])


def test_bodies_per_engine() -> None:
    body = build_body(ITEM, api="chat", model="m", profile=get_engine("vllm").profile,
                      fixed_output_length=True, request_fields={"temperature": 0})  # fmt: skip
    assert body == {
        "model": "m", "stream": True, "max_tokens": 7,
        "messages": [{"role": "user", "content": "hi there"}],
        "stream_options": {"include_usage": True}, "ignore_eos": True, "min_tokens": 7,
        "temperature": 0,
    }  # fmt: skip
    llama = build_body(ITEM, api="completions", model="m", profile=get_engine("llamacpp").profile,
                       fixed_output_length=True, request_fields={})  # fmt: skip
    assert (
        llama["prompt"] == "hi there" and llama["ignore_eos"] is True and "min_tokens" not in llama
    )
    plain = build_body(ITEM, api="chat", model="m", profile=get_engine("transformers").profile,
                       fixed_output_length=False, request_fields={})  # fmt: skip
    assert set(plain) == {"model", "stream", "max_tokens", "messages"}
    fixed = build_body(ITEM, api="chat", model="m", profile=get_engine("transformers").profile,
                       fixed_output_length=True, request_fields={})  # fmt: skip
    assert set(fixed) == {"model", "stream", "max_tokens", "messages", "generation_config"}
    # Continuous batching ignored min_new_tokens (answers ended at 12-18 of 32 tokens); an end
    # token that can never be sampled holds in both of transformers' generation paths.
    assert json.loads(fixed["generation_config"]) == {
        "max_new_tokens": 7,
        "eos_token_id": -1,
        "do_sample": False,
    }


def test_engine_errors() -> None:
    from quantbench.load.requests import UnforceableLengthError

    # refused when the rules are made (once, before any request), with the three fixes
    with pytest.raises(UnforceableLengthError, match="cannot be asked of server profile 'openai'"):
        build_body(ITEM, api="chat", model="m", profile=get_profile("openai"),
                   fixed_output_length=True, request_fields={})  # fmt: skip
    # the user's own field forces it: honoured as given
    body = build_body(ITEM, api="chat", model="m", profile=get_profile("openai"),
                      fixed_output_length=True, request_fields={"ignore_eos": True})  # fmt: skip
    assert body["ignore_eos"] is True
    with pytest.raises(ValueError, match="unknown server profile 'tgi'; known now: openai, mock"):
        get_profile("tgi")
    # an engine's profile is known by name once the engine is loaded (registered with it)
    assert get_profile("llamacpp") is get_engine("llamacpp").profile


def test_a_named_workload_without_a_size_measures_to_its_default_precision() -> None:
    # `use: rag` alone (and `quantbench load --workload rag`) was refused: "has no size".
    spec = WorkloadSpec.model_validate({"name": "rag", "use": "rag"})
    assert spec.precision is not None
    assert [t.split()[0] for t in spec.precision.targets] == ["ttft:p50", "tpot:p50"]
    assert spec.points and spec.num_requests is None
    # a size the user gave is kept as it is
    sized = WorkloadSpec.model_validate({"name": "rag", "use": "rag", "num_requests": 8})
    assert sized.precision is None and sized.num_requests == 8
    with pytest.raises(ValueError, match="has no size"):  # traffic of one's own still needs one
        WorkloadSpec.model_validate(
            {"prompts": {"source": "random", "input_len": 8, "output_len": 8},
             "load": [{"kind": "concurrency", "concurrency": 1}]}
        )  # fmt: skip
