"""A small but realistic stage-output tree for the report, built with the project's own code.

Every file is a schema model (:mod:`quantbench.schemas`) written by ``schemas.io.write``, so the
tree has exactly the shape the stages write, and a field renamed in a schema changes it too.
Request records are synthetic (a seeded latency model per pair, server setting and load), but
everything above them is computed the way the pipeline computes it: each repeat's point result by
the load harness's ``summarize``, rows by the bench stage's ``fold_repeats``, the pair's best by
``pick_best``, estimates by the estimate stage's ``write_estimates``.

The tree has: a transformers pair with a server sweep and two repeats, a llama.cpp pair with a
closed- and an open-loop point, and a vLLM pair whose server never started (its log tail holds
markup, as do a model answer and a request error, to check escaping).

Run ``python -m tests.report.conftest DIR`` (from the repository root) to build one by hand.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.schemas import examples

from quantbench.bench.results import failed_row, fold_repeats, pick_best
from quantbench.load.records import write_records
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import BenchRow, PairSummary, ServerPoint, ServerReport
from quantbench.slo import parse_slo, per_request

FIXTURE_SLO = "ttft:p95<=500ms; tpot:p50<=60ms; error_rate<=0.05"
FIXTURE_PROFILES = {"batch": "output_tps>=40", "strict": "ttft:p99<=20ms"}
PRICE = 0.5
HOSTILE = "<script>alert('x')</script>"
OVERLOADED = "HTTP 500: <b>engine overloaded</b>"

ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
ARGV = {
    "transformers": "transformers serve --host 127.0.0.1 --port 41001 --device cpu",
    "llamacpp": "build/llama.cpp/cmake/bin/llama-server -m "
    "models/variants/gguf-q4_k_m/model-Q4_K_M.gguf --port 41002 -t 1 -np 1 --jinja",
    "vllm": "python -m vllm.entrypoints.openai.api_server --model models/variants/gptq-w4g64 "
    "--port 41003 --enforce-eager",
}

# pair -> how it behaves: per server point (label, changed settings, ttft ms, itl ms, slowdown per
# extra concurrent stream); load points; repeats; or a start-up failure.
PAIRS: dict[str, dict[str, Any]] = {
    "bf16-transformers": {
        "variant": "bf16", "format": "bf16", "engine": "transformers", "version": "5.17.0",
        "servers": [
            ("continuous_batching=off", {"continuous_batching": False}, 160.0, 48.0, 0.55),
            ("continuous_batching=on", {"continuous_batching": True}, 170.0, 50.0, 0.18),
        ],
        "load": [{"kind": "concurrency", "concurrency": 1}, {"kind": "concurrency", "concurrency": 4}],
        "repeats": 2,
        "rss": [1_150_000_000, 1_420_000_000],
    },
    "gguf-q4_k_m-llamacpp": {
        "variant": "gguf-q4_k_m", "format": "gguf", "engine": "llamacpp",
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
        "variant": "gptq-w4g64", "format": "gptq", "engine": "vllm", "version": "0.32.0",
        "servers": [("default", {}, 0.0, 0.0, 0.0)],
        "load": [{"kind": "concurrency", "concurrency": 1}, {"kind": "concurrency", "concurrency": 4}],
        "repeats": 1,
        "rss": [None],
        "fails": f"server exited with code 1 before it was ready; last lines of its log:\n"
        f"ValueError: group size mismatch {HOSTILE}",
    },
}  # fmt: skip

# variant -> (perplexity, mean KL, top-1 agreement, held-out correct of 13, size, bits/weight)
QUALITY: dict[str, tuple[float, float, float, int, int, float]] = {
    "bf16": (16.000, 0.0, 1.0, 13, 272_585_647, 16.0),
    "gguf-q4_k_m": (16.894, 0.061, 0.912, 12, 105_000_000, 6.17),
    "gptq-w4g64": (19.24, 0.182, 0.853, 9, 118_000_000, 6.9),
}


def _label(shape: dict[str, Any]) -> str:
    if shape["kind"] == "concurrency":
        return f"c{shape['concurrency']}"
    return f"r{shape['rate']:g}"


def _point_row(out: Path, label: str, shape: dict[str, Any], spec: dict[str, Any], rng, server):
    """One load point's row, as bench.run measures it (records, session summaries, folding)."""
    _, _, ttft, itl, slow = server
    point = _label(shape)
    if spec.get("fails"):
        return {**failed_row(spec["fails"]), "load_point": point, "shape": shape}
    results = []
    for k in range(spec["repeats"]):
        records = examples.records(rng, point, shape, ttft, itl, slow, error=OVERLOADED)
        run_dir = out / label / point / f"r{k}"
        write_records(run_dir / "records.jsonl", records)
        result = examples.point_result(records, shape, FIXTURE_SLO)
        session = examples.session_summary([result], spec["engine"], FIXTURE_SLO)
        schema_io.write(run_dir / "summary.json", session)
        results.append(result)
    row = fold_repeats(results, confidence=0.95, price_per_hour=PRICE)
    return {**row, "error": None, "load_point": point, "shape": shape}


def _pair(root: Path, name: str, spec: dict[str, Any], rng: random.Random) -> None:
    out = root / "reports" / "bench" / name
    rows: list[dict[str, Any]] = []
    servers: list[ServerPoint] = []
    error = spec.get("fails")
    for server, rss in zip(spec["servers"], spec["rss"], strict=True):
        label, settings = server[0], server[1]
        argv = ARGV[spec["engine"]].split() + (
            ["--continuous-batching"] if settings.get("continuous_batching") else []
        )
        common = {"server_point": label, "settings": settings, "command": argv, "env": ENV}
        for shape in spec["load"]:
            rows.append({**common, **_point_row(out, label, shape, spec, rng, server)})
        if error:
            (out / label).mkdir(parents=True, exist_ok=True)
            (out / label / "server.log").write_text(error + "\n", encoding="utf-8")
        report = ServerReport(
            engine=spec["engine"], argv=argv, env=ENV, url="http://127.0.0.1:41001",
            ready_seconds=None if error else 4.2, peak_rss_bytes=rss, peak_gpu_bytes=None,
            memory_samples=0 if error else 40, exit="exit code 1" if error else None,
            log=f"{out.as_posix()}/{label}/server.log",
        )  # fmt: skip
        servers.append(ServerPoint(**common, report=report, error=error, search=None))
    goodput = bool(per_request(parse_slo(FIXTURE_SLO)))
    best = pick_best(rows, goodput)
    summary = PairSummary(
        pair=name, variant=spec["variant"], format=spec["format"], engine=spec["engine"],
        engine_version=spec["version"], mode="grid", slo=FIXTURE_SLO,
        ranked_by="goodput" if goodput else "output_throughput", price_per_hour=PRICE,
        currency="USD", server_points=len(spec["servers"]),
        rows=[BenchRow.model_validate(r) for r in rows], servers=servers,
        best=BenchRow.model_validate(best) if best else None, wall_seconds=61.5,
    )  # fmt: skip
    schema_io.write(out / "summary.json", summary)


def _quality(root: Path, name: str) -> None:
    ppl, kl, top1, correct, size, bpw = QUALITY[name]
    wrong = "<img src=x onerror=alert(1)> no idea"
    report = examples.quality_report(name, ppl, kl, top1, correct, size, bpw, wrong)
    schema_io.write(root / "reports" / "quality" / f"{name}.json", report)
    record = examples.variant_record(name, size, bpw)
    schema_io.write(root / "models" / "variants" / name / "variant.json", record)


def _provenance(root: Path) -> None:
    for output in (
        examples.base_model_info(),
        examples.merged_model_info(),
        examples.merge_report(),
        examples.finetune_report(),
        examples.env_info(),
    ):
        schema_io.write(root / output.OUTPUT, output)
    examples.estimates_file(root)  # also writes models/merged/config.json


def build_fixture_tree(root: Path) -> Path:
    """Write the whole fake tree below root (root plays the repository root)."""
    rng = random.Random(7)
    _provenance(root)
    for name, spec in PAIRS.items():
        _pair(root, name, spec, rng)
    for name in QUALITY:
        _quality(root, name)
    return root


@pytest.fixture(scope="session")
def fixture_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture_tree(tmp_path_factory.mktemp("report-tree"))


if __name__ == "__main__":
    print(build_fixture_tree(Path(sys.argv[1])))
