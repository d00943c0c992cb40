"""Bench arithmetic and decisions on hand-made inputs: search, statistics, cost, best, pairs."""

from __future__ import annotations

import math

import pytest

from quantbench.bench.cost import cost_per_million_tokens
from quantbench.bench.results import failed_row, pick_best
from quantbench.bench.search import find_edge, grid_size
from quantbench.bench.stats import estimate, t_critical
from quantbench.config import ConfigError, parse_config


@pytest.mark.parametrize("edge", [1, 2, 5, 13, 37, 64])
def test_search_finds_the_edge_of_a_monotone_server(edge: int) -> None:
    calls: list[float] = []

    def passes(load: float) -> bool:
        calls.append(load)
        return load <= edge

    result = find_edge(passes, 1, 64)
    assert result.edge == edge
    assert len(calls) == len(set(calls)) == result.runs  # never runs a point twice
    assert result.runs <= 2 * math.ceil(math.log2(64)) + 1


def test_search_when_nothing_or_everything_passes() -> None:
    assert find_edge(lambda load: False, 1, 64).edge is None
    everything = find_edge(lambda load: True, 1, 48)
    assert everything.edge == 48 and [x for x, _ in everything.tried] == [1, 2, 4, 8, 16, 32, 48]


def test_rate_search_stops_at_the_asked_precision() -> None:
    result = find_edge(lambda r: r <= 3.3, 0.5, 16, integer=False, precision=0.05)
    assert result.edge is not None and 3.3 * 0.95 <= result.edge <= 3.3


def test_grid_size_matches_the_resolution() -> None:
    assert grid_size(1, 64, integer=True, precision=0.1) == 64
    assert grid_size(1, 2, integer=False, precision=0.1) == 8  # 1, 1.1, ..., 1.1^7 = 1.95


def test_confidence_interval_by_hand() -> None:
    est = estimate([10.0, 12.0, 14.0], 0.95)
    assert est.mean == 12.0 and est.std == pytest.approx(2.0)
    assert est.half_width == pytest.approx(4.303 * 2.0 / math.sqrt(3))
    single = estimate([5.0])
    assert single.n == 1 and math.isnan(single.half_width)
    assert estimate([]) is None and estimate([float("nan")]) is None
    assert t_critical(0.95, 100) == 1.960 and t_critical(0.9, 1) == 6.314


def test_cost_per_million_tokens() -> None:
    # 2.00/hour at 100 tokens/s: 360,000 tokens an hour -> 2 / 0.36 = 5.5556 per million
    assert cost_per_million_tokens(2.0, 100.0) == pytest.approx(5.5556, rel=1e-4)
    assert cost_per_million_tokens(2.0, 0.0) is None
    assert cost_per_million_tokens(0.0, 10.0) == 0.0


def test_best_prefers_passing_rows_then_goodput_then_latency() -> None:
    rows = [
        {"slo_passed": False, "goodput": 9.0, "request_throughput": 9.0, "output_throughput": 900,
         "completed": 9, "error": None},
        {"slo_passed": True, "goodput": 3.0, "request_throughput": 3.0, "output_throughput": 300,
         "completed": 9, "e2e_p99_ms": 900, "error": None, "id": "slow"},
        {"slo_passed": True, "goodput": 3.0, "request_throughput": 3.0, "output_throughput": 300,
         "completed": 9, "e2e_p99_ms": 500, "error": None, "id": "fast"},
        # many short answers per second, but fewer tokens of good requests: not the best
        {"slo_passed": True, "goodput": 6.0, "request_throughput": 6.0, "output_throughput": 120,
         "completed": 9, "e2e_p99_ms": 100, "error": None, "id": "short"},
        {**failed_row("server exited"), "id": "dead"},
    ]  # fmt: skip
    assert pick_best(rows, rank_by_goodput=True)["id"] == "fast"
    assert pick_best(rows, rank_by_goodput=False)["id"] == "fast"
    # half the requests missed a per-request SLO: half the tokens count
    halved = {**rows[2], "goodput": 1.5, "id": "halved"}
    assert pick_best([halved, rows[3]], rank_by_goodput=True)["id"] == "halved"  # 150 > 120
    assert pick_best(rows[:1], rank_by_goodput=True) is None


VARIANTS = {"bf16": {"format": "bf16"}, "gguf-q8_0": {"format": "gguf", "type": "Q8_0"}}


def pairs(**entries: tuple[str, str]) -> dict:
    return {"pairs": {k: {"variant": v, "engine": e} for k, (v, e) in entries.items()}}


def test_pairs_are_named_variant_engine_and_servable() -> None:
    ok = parse_config(
        {"variants": VARIANTS, "bench": pairs(**{"bf16-transformers": ("bf16", "transformers")})}
    )
    assert list(ok.bench.pairs) == ["bf16-transformers"]
    with pytest.raises(ConfigError, match="must be named 'bf16-transformers'"):
        parse_config({"variants": VARIANTS, "bench": pairs(x=("bf16", "transformers"))})
    with pytest.raises(ConfigError, match="engine vllm is disabled"):
        parse_config(
            {
                "variants": VARIANTS,
                "engines": {"vllm": {"enabled": False}},
                "bench": pairs(**{"bf16-vllm": ("bf16", "vllm")}),
            }
        )
    with pytest.raises(ConfigError, match="unknown engine 'tgi'"):
        parse_config({"variants": VARIANTS, "bench": pairs(**{"bf16-tgi": ("bf16", "tgi")})})
    with pytest.raises(ConfigError, match="no variant 'awq'"):
        parse_config({"variants": VARIANTS, "bench": pairs(**{"awq-vllm": ("awq", "vllm")})})
    with pytest.raises(ConfigError) as info:
        parse_config(
            {"variants": VARIANTS, "bench": pairs(**{"gguf-q8_0-vllm": ("gguf-q8_0", "vllm")})}
        )
    assert "cannot serve gguf-q8_0 (format gguf); engines that serve gguf: llamacpp" in str(
        info.value
    )


def test_engine_sweep_is_validated() -> None:
    with pytest.raises(ConfigError, match="'paralel' is not a setting of this engine"):
        parse_config({"engines": {"llamacpp": {"sweep": {"paralel": [1, 4]}}}})
    with pytest.raises(ConfigError, match="parallel=0 is not valid"):
        parse_config({"engines": {"llamacpp": {"sweep": {"parallel": [1, 0]}}}})
    config = parse_config({"engines": {"llamacpp": {"sweep": {"parallel": [1, 4]}}}})
    points = config.engines["llamacpp"].sweep_points()
    assert [label for label, _ in points] == ["parallel=1", "parallel=4"]
    assert points[1][1].parallel == 4 and points[1][1].sweep == {}
