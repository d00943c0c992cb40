"""Predictions for the bench pairs: each setting's batch limit, each workload's own lengths."""

from __future__ import annotations

import pytest
from tests.schemas import examples

from quantbench.engines.llamacpp import LlamaCppSettings
from quantbench.engines.transformers import TransformersSettings
from quantbench.estimate.hardware import HardwareSpec
from quantbench.estimate.pairs import BenchPair, WorkloadShape, predict_pairs, workload_shapes
from quantbench.estimate.spec import EstimatedVariant, EstimateSettings

CPU = HardwareSpec.model_validate(examples.CPU_2CORE)
VARIANTS = {
    "bf16": EstimatedVariant(name="bf16", format="bf16"),
    "gguf-q4_k_m": EstimatedVariant(name="gguf-q4_k_m", format="gguf", gguf_type="Q4_K_M"),
}
PAIRS = {
    "bf16-transformers": BenchPair(
        "bf16",
        "transformers",
        TransformersSettings(sweep={"continuous_batching": [False, True]}),
    ),
    "gguf-q4_k_m-llamacpp": BenchPair(
        "gguf-q4_k_m", "llamacpp", LlamaCppSettings(sweep={"parallel": [1, 4]})
    ),
}
WORKLOADS = {
    "chat": WorkloadShape(input_len=40, output_len=32, concurrencies=(1, 4)),
    "multi-turn": WorkloadShape(input_len=400, output_len=48, concurrencies=(4,)),
}


@pytest.fixture
def predictions(smol, tmp_path):
    settings = EstimateSettings(efficiency={"step_overhead_ms": 5.0})
    return predict_pairs(smol, tmp_path, VARIANTS, PAIRS, WORKLOADS, "this", CPU, settings)


def _one(predictions, pair, setting, workload):
    (found,) = [
        p for p in predictions if (p.pair, p.server_point, p.workload) == (pair, setting, workload)
    ]
    return found


def test_every_pair_setting_and_workload_is_predicted_under_the_bench_labels(predictions):
    keys = {(p.pair, p.server_point, p.workload) for p in predictions}
    assert keys == {
        (pair, label, workload)
        for pair, spec in PAIRS.items()
        for label, _ in spec.settings.sweep_points()
        for workload in WORKLOADS
    }
    chat = _one(predictions, "gguf-q4_k_m-llamacpp", "parallel=4", "chat")
    assert (chat.input_len, chat.output_len) == (40, 32)
    assert [p.concurrency for p in chat.points] == list(range(1, 17))  # measured and searched
    multi = _one(predictions, "gguf-q4_k_m-llamacpp", "parallel=4", "multi-turn")
    assert (multi.input_len, multi.output_len) == (400, 48)


def test_a_setting_that_serves_one_at_a_time_gains_nothing_from_more_clients(predictions):
    serial = _one(predictions, "bf16-transformers", "continuous_batching=off", "chat")
    batching = _one(predictions, "bf16-transformers", "continuous_batching=on", "chat")
    assert serial.max_batch == 1 and batching.max_batch is None
    one, four = serial.at(1), serial.at(4)
    assert four.output_tps == pytest.approx(one.output_tps)
    assert four.queue_wait_ms > 0 and four.ttft_ms > 3 * one.e2e_s * 1e3
    assert batching.at(4).output_tps > 1.5 * four.output_tps


def test_llama_cpp_slots_cap_the_batch(predictions):
    one_slot = _one(predictions, "gguf-q4_k_m-llamacpp", "parallel=1", "chat")
    four_slots = _one(predictions, "gguf-q4_k_m-llamacpp", "parallel=4", "chat")
    assert (one_slot.max_batch, four_slots.max_batch) == (1, 4)
    assert one_slot.at(4).output_tps == pytest.approx(one_slot.at(1).output_tps)
    assert four_slots.at(8).output_tps == pytest.approx(four_slots.at(4).output_tps)
    assert four_slots.at(4).output_tps > 1.5 * one_slot.at(4).output_tps


def test_workload_shapes_take_each_workload_s_generated_means():
    summaries = {
        "chat": {"input_tokens": {"mean": 40.4}, "output_tokens": {"mean": 31.6}},
        "rag": {"input_tokens": {"mean": 1460.0}, "output_tokens": {"mean": 48.2}},
    }
    from quantbench.load.spec import WorkloadSpec

    def spec(*streams: int) -> WorkloadSpec:
        return WorkloadSpec.model_validate(
            {"prompts": {"source": "random", "input_len": 8, "output_len": 8}, "num_requests": 8,
             "load": [{"kind": "concurrency", "concurrency": c, "label": f"p{i}"}
                      for i, c in enumerate(streams)]}
        )  # fmt: skip

    shapes = workload_shapes({"chat": spec(4, 1, 4), "rag": spec(2)}, summaries)
    assert shapes["chat"] == WorkloadShape(40, 32, (1, 4))
    assert shapes["rag"] == WorkloadShape(1460, 48, (2,))
