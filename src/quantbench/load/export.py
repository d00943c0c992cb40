"""Export a point's result in the field names of ``vllm bench serve``'s result JSON.

So a run of this harness can be put next to a ``vllm bench serve --save-result`` file: the same
keys (``request_throughput``, ``mean_ttft_ms``, ``p99_itl_ms``, ``median_e2el_ms``, ...) with the
same meanings and units. Like vLLM, a latency without any sample reads 0, and the per-request lists
(``ttfts``, ``itls``, ...) are included only when records are given (vLLM's ``--save-detailed``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from quantbench.load.metrics import LatencyStats, PointResult
from quantbench.load.records import RequestRecord

# our metric name -> vLLM's
_VLLM_METRIC = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}


def _latency_fields(
    name: str, stats: LatencyStats | None, percentiles: Sequence[float]
) -> dict[str, float]:
    out = {
        f"mean_{name}_ms": stats.mean_ms if stats else 0.0,
        f"median_{name}_ms": stats.median_ms if stats else 0.0,
        f"std_{name}_ms": stats.std_ms if stats else 0.0,
    }
    for p in percentiles:
        word = str(int(p)) if float(p).is_integer() else str(p)
        key = f"p{int(p)}" if float(p).is_integer() else f"p{p:g}"
        out[f"p{word}_{name}_ms"] = stats.percentiles_ms.get(key, 0.0) if stats else 0.0
    return out


def to_vllm_result(
    point: PointResult,
    *,
    model: str,
    api: str,
    percentiles: Sequence[float],
    tokenizer: str | None = None,
    records: Sequence[RequestRecord] | None = None,
) -> dict[str, Any]:
    shape = point.shape
    closed = shape.get("kind") == "concurrency"
    result: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S", time.localtime(point.started_at)),
        "endpoint_type": "openai-chat" if api == "chat" else "openai",
        "backend": "openai-chat" if api == "chat" else "openai",
        "label": point.point,
        "model_id": model,
        "tokenizer_id": tokenizer,
        "num_prompts": point.requests,
        "request_rate": "inf" if closed else shape.get("rate"),
        "burstiness": 1.0 if closed else shape.get("burstiness", 1.0),
        "max_concurrency": shape.get("concurrency") if closed else shape.get("max_concurrency"),
        "duration": point.duration_s,
        "completed": point.completed,
        "failed": point.failed,
        "total_input_tokens": point.total_input_tokens,
        "total_output_tokens": point.total_output_tokens,
        "request_throughput": point.request_throughput,
        "request_goodput": point.goodput,
        "output_throughput": point.output_throughput,
        "total_token_throughput": point.total_token_throughput,
        "max_output_tokens_per_s": point.max_output_tokens_per_s,
        "max_concurrent_requests": point.max_concurrent_requests,
    }
    for ours, theirs in _VLLM_METRIC.items():
        result.update(_latency_fields(theirs, getattr(point, ours), percentiles))
    if records is not None:
        measured = [r for r in records if r.phase == "measured"]
        ok = [r.status == "completed" for r in measured]
        result.update(
            input_lens=[r.prompt_tokens or 0 for r in measured],
            output_lens=[
                (r.output_tokens or 0) if good else 0 for r, good in zip(measured, ok, strict=True)
            ],
            ttfts=[r.ttft or 0.0 for r in measured],
            itls=[r.itls for r in measured],
            latencies=[r.e2e or 0.0 for r in measured],
            start_times=[r.send_time for r in measured],
            generated_texts=[r.output_text or "" for r in measured],
            errors=[r.error or "" for r in measured],
        )
    return result
