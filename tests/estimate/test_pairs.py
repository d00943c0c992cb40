"""Predictions for the bench pairs: each setting's batch limit, each workload's own lengths."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.schemas import examples

from quantbench.engines.llamacpp import LlamaCppSettings
from quantbench.engines.transformers import TransformersSettings
from quantbench.estimate.pairs import BenchPair, WorkloadShape, predict_pairs, workload_shapes
from quantbench.estimate.spec import EstimateSettings
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.hardware import HardwareSpec
from quantbench.schemas.step_fit import StepFit

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


Q4_PROBE = StepFit(
    request_ms=25.0, prefill_ms_per_token=3.5, shared_step_ms=12.0, own_step_ms=9.0,
    context_ms_per_token=0.0, reference_context=59.0, batch_measured=4,
    batched_step_ms={"1": 21.0, "2": 33.0, "3": 42.0, "4": 42.5}, cached_prompt_tokens=26.0,
)  # fmt: skip
"""A probe of llama.cpp's Q4_K_M with 4 slots, as measured (its step flat from 3 to 4)."""


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
        "chat": examples.workload_means(40.4, 31.6),
        "rag": examples.workload_means(1460.0, 48.2),
    }
    from quantbench.workloads.spec import WorkloadSpec

    def spec(*streams: int) -> WorkloadSpec:
        return WorkloadSpec.model_validate(
            {"prompts": {"source": "random", "input_len": 8, "output_len": 8}, "num_requests": 8,
             "load": [{"kind": "concurrency", "concurrency": c, "label": f"p{i}"}
                      for i, c in enumerate(streams)]}
        )  # fmt: skip

    shapes = workload_shapes({"chat": spec(4, 1, 4), "rag": spec(2)}, summaries)
    assert shapes["chat"] == WorkloadShape(40, 32, (1, 4))
    assert shapes["rag"] == WorkloadShape(1460, 48, (2,))


def test_workload_shapes_add_the_template_and_carry_reuse_and_think_time():
    from quantbench.workloads.spec import WorkloadSpec

    summaries = {  # no think before a conversation's first turn: 559 of its 815 requests
        "multi-turn": examples.workload_means(115.0, 21.0, 815, think_s=(1.0, 559), reuse=0.93)
    }
    spec = WorkloadSpec.model_validate(
        {"prompts": {"source": "random", "input_len": 8, "output_len": 8}, "num_requests": 8,
         "load": [{"kind": "concurrency", "concurrency": 4, "label": "c4"}]}
    )  # fmt: skip
    shape = workload_shapes({"multi-turn": spec}, summaries, {"multi-turn": 40.0})["multi-turn"]
    assert shape.input_len == 155 and shape.template_tokens == 40.0
    assert shape.think_s == pytest.approx(559 / 815)
    # without a prefix cache every served token is computed; with one, the reusable share of
    # the workload's own tokens and the template's cached head are not
    assert shape.computed_prompt(False, 26.0) == 155
    assert shape.computed_prompt(True, 26.0) == pytest.approx(115 * 0.07 + 14)


def test_a_probed_pair_is_predicted_from_its_probe(smol, tmp_path):
    """The probed costs replace the roofline's: TPOT at one stream is the probed step, and a
    llama.cpp pair's prompt counts only what its prefix cache did not hold."""
    pairs = {"gguf-q4_k_m-llamacpp": replace(PAIRS["gguf-q4_k_m-llamacpp"], fit=Q4_PROBE)}
    chat = {"chat": WorkloadShape(64, 33, (1, 4), template_tokens=40.0)}
    settings = EstimateSettings()
    (one_slot, four) = predict_pairs(smol, tmp_path, VARIANTS, pairs, chat, "this", CPU, settings)
    alone = four.at(1)
    assert alone.itl_ms == pytest.approx(21.0)
    # TTFT alone: the request's cost and the 64 - 26 tokens its prefix cache did not hold
    assert alone.ttft_ms == pytest.approx(25.0 + 3.5 * 38)
    assert alone.output_tps == pytest.approx(33 / (alone.ttft_ms / 1e3 + 32 * 0.021))
    # four streams: the measured step of four, and the others' prompts riding along
    assert four.at(4).itl_ms == pytest.approx(42.5 + 3 * 38 / 32 * 3.5)
    # one slot: four clients queue for it; the running request steps alone
    assert one_slot.server_point == "parallel=1" and one_slot.at(4).itl_ms == pytest.approx(21.0)


def test_a_cache_of_blocks_keeps_only_whole_blocks_of_each_shared_prefix():
    # three requests as served: a first turn (nothing shared but the template's head), two
    # later turns sharing 140 and 300 tokens with their conversation's previous request
    shape = WorkloadShape(
        160,
        20,
        (4,),
        template_tokens=40.0,
        prompts=((60.0, 0.0, 0.0), (150.0, 140.0, 80.0), (320.0, 300.0, 80.0)),
    )
    assert shape.computed_prompt(False, 26.0, 128) == 160
    # per token (llama.cpp): all of each shared prefix, the template head at least
    assert shape.computed_prompt(True, 26.0, 1) == pytest.approx((34 + 10 + 20) / 3)
    # blocks of 128 (vLLM on a CPU): 128 of 140, 256 of 300, none of a 26-token head
    assert shape.computed_prompt(True, 0.0, 128) == pytest.approx((60 + 22 + 64) / 3)
    # a cache that cannot keep every client's conversation (one llama.cpp slot, four clients)
    # holds only the 80-token system prompt the conversations share
    assert shape.computed_prompt(True, 26.0, 1, keeps_history=False) == pytest.approx(
        (34 + 70 + 240) / 3
    )


def test_one_slot_for_four_conversations_loses_their_histories(smol, tmp_path):
    pairs = {"gguf-q4_k_m-llamacpp": replace(PAIRS["gguf-q4_k_m-llamacpp"], fit=Q4_PROBE)}
    turns = ((150.0, 140.0, 80.0),) * 4
    multi = {"multi-turn": WorkloadShape(150, 20, (4,), template_tokens=40.0, prompts=turns)}
    one, four = predict_pairs(smol, tmp_path, VARIANTS, pairs, multi, "this", CPU,
                              EstimateSettings())  # fmt: skip
    # alone, the one slot keeps the history: 10 tokens to compute; with four clients, 70
    assert one.at(1).ttft_ms == pytest.approx(25.0 + 3.5 * 10)
    assert one.at(4).ttft_ms > one.at(2).ttft_ms
    # four slots keep four conversations: the running request computes 10 tokens at 4 too
    assert four.at(4).itl_ms == pytest.approx(42.5 + 3 * 10 / 19 * 3.5)


@pytest.mark.parametrize("probed", ["float32", "bfloat16"])
def test_a_server_started_in_float32_is_predicted_from_the_fp32_weights_it_holds(
    smol, tmp_path, probed_dtype, probed
):
    """`dtype: native` starts transformers (and vLLM's unquantized model) in float32 where this
    CPU emulates bf16: the server then holds and reads the bf16 checkpoint as fp32, twice its
    bytes. The plan priced every point at the checkpoint's bf16 bytes, whatever the dtype its
    server computes in; now each point at what its own server holds."""
    from quantbench.engines.vllm import VllmSettings

    probed_dtype(probed)  # what the timed probe would have found on this CPU
    python = tmp_path / "python"
    python.touch()
    variants = {**VARIANTS, "awq": EstimatedVariant(name="awq", format="awq", bits=4)}
    pairs = {
        "bf16-transformers": BenchPair(
            "bf16", "transformers", TransformersSettings(sweep={"dtype": ["auto", "native"]})
        ),
        "awq-transformers": BenchPair("awq", "transformers", TransformersSettings(dtype="native")),
        "bf16-vllm": BenchPair(
            "bf16", "vllm", VllmSettings(python=python, device="cpu", dtype="native")
        ),
        "awq-vllm": BenchPair(
            "awq", "vllm", VllmSettings(python=python, device="cpu", dtype="native")
        ),
    }
    chat = {"chat": WorkloadShape(40, 32, (1,))}
    settings = EstimateSettings(efficiency={"step_overhead_ms": 5.0})
    found = {
        (p.pair, p.server_point): p.at(1).itl_ms
        for p in predict_pairs(smol, tmp_path, variants, pairs, chat, "this", CPU, settings)
    }
    auto = found[("bf16-transformers", "dtype=auto")]
    native = found[("bf16-transformers", "dtype=native")]
    if probed == "float32":
        assert native > 1.5 * auto  # a memory-bound step reads twice the bytes
        assert found[("bf16-vllm", "default")] > 1.5 * auto
        # transformers decompresses AWQ to the dtype it runs in; vLLM keeps it packed
        assert found[("awq-transformers", "default")] == pytest.approx(native)
        assert found[("awq-vllm", "default")] < auto
    else:  # bf16 native: the checkpoint's own bytes, as `auto` holds them
        assert native == pytest.approx(auto)
        assert found[("bf16-vllm", "default")] == pytest.approx(auto)
        assert found[("awq-transformers", "default")] == pytest.approx(auto)
