"""Which pairs start a server on this machine: a pair its engine cannot serve here and its fallback
(bench.pairs.<name>.fallback_for), exactly one of the two running; the fallbacks' declarations
checked; a pair that runs nothing here writes a summary that says why and starts no server."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from quantbench.bench.run import run_pair
from quantbench.bench.served_here import not_served_here
from quantbench.bench.spec import BenchSettings

from .conftest import FakeSettings
from .test_run import job, no_fake_servers_left

NO_KERNEL = "vLLM's CPU kernel library has no cpu_gemm_wna16"


def _pairs(**extra: dict) -> dict:
    return {
        "gptq-w4g64-vllm": {"variant": "gptq-w4g64", "engine": "vllm"},
        "gptq-w4g64-transformers": {
            "variant": "gptq-w4g64", "engine": "transformers", "fallback_for": "gptq-w4g64-vllm",
        },
        "bf16-transformers": {"variant": "bf16", "engine": "transformers"},
        **extra,
    }  # fmt: skip


def test_where_the_engine_has_no_kernel_its_fallback_serves_the_variant() -> None:
    bench = BenchSettings(pairs=_pairs())
    vllm_cannot = {"gptq-w4g64-vllm": NO_KERNEL}
    skipped = not_served_here(bench.pairs, vllm_cannot.get)
    assert list(skipped) == ["gptq-w4g64-vllm"]
    assert NO_KERNEL in skipped["gptq-w4g64-vllm"]
    assert "gptq-w4g64-transformers serves it instead" in skipped["gptq-w4g64-vllm"]


def test_where_the_engine_serves_it_the_fallback_starts_nothing() -> None:
    bench = BenchSettings(pairs=_pairs())
    skipped = not_served_here(bench.pairs, lambda name: None)
    assert list(skipped) == ["gptq-w4g64-transformers"]
    assert skipped["gptq-w4g64-transformers"].startswith(
        "not needed here: gptq-w4g64-vllm serves gptq-w4g64 on this machine"
    )


def test_a_pair_the_engine_cannot_serve_without_a_fallback_is_left_to_be_refused() -> None:
    # not silently skipped: the preflight check and the stage refuse it, saying how to fix it
    bench = BenchSettings(pairs={"gptq-w4g64-vllm": {"variant": "gptq-w4g64", "engine": "vllm"}})
    assert not_served_here(bench.pairs, {"gptq-w4g64-vllm": NO_KERNEL}.get) == {}


@pytest.mark.parametrize(
    ("fallback", "message"),
    [
        (
            {"variant": "gptq-w4g64", "engine": "llamacpp", "fallback_for": "nope"},
            "not another pair",
        ),
        ({"variant": "bf16", "engine": "vllm", "fallback_for": "gptq-w4g64-vllm"}, "same variant"),
        (
            {
                "variant": "gptq-w4g64",
                "engine": "llamacpp",
                "fallback_for": "gptq-w4g64-transformers",
            },
            "itself a fallback",
        ),
        (
            {"variant": "gptq-w4g64", "engine": "llamacpp", "fallback_for": "gptq-w4g64-vllm"},
            "already the fallback",
        ),
    ],
)
def test_a_fallback_must_stand_in_for_one_other_pair_of_its_variant(
    fallback: dict, message: str
) -> None:
    name = f"{fallback['variant']}-{fallback['engine']}"
    with pytest.raises(ValidationError, match=message):
        BenchSettings(pairs=_pairs(**{name: fallback}))


@pytest.mark.server
def test_a_pair_not_served_here_starts_no_server_and_says_why(
    fake_engine, fake_artifact, tmp_path: Path
) -> None:
    # a setting that would crash its server: had one been started, its point would say so
    pair = replace(
        job(fake_engine, fake_artifact, FakeSettings(crash=True)),
        not_served=f"not served on this machine: {NO_KERNEL}",
    )
    summary = run_pair(pair, tmp_path)
    assert summary.not_served == f"not served on this machine: {NO_KERNEL}"
    assert summary.servers == [] and summary.rows == [] and summary.server_points == 0
    assert summary.best == {"chat": None}
    assert no_fake_servers_left(tmp_path) and not list(tmp_path.glob("script-*.json"))
