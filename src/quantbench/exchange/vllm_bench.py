"""Read ``vllm bench serve --save-result`` JSON into a :class:`ForeignRun`.

vLLM's definitions are quantbench's (``vllm/benchmarks/serve.py``, ``calculate_metrics``) but for
one: its TTFT runs to the first chunk carrying ``choices``, a role-only chunk included, where ours
runs to the first chunk with content. A server that sends the role before its first token (the
scripted server of tests/exchange/golden does; vLLM's own chat streams send it with the first
token) reads an earlier TTFT there, and a TPOT longer by that gap / (tokens - 1). TPOT is per
request (E2E - TTFT) / (tokens - 1), ITL the gaps between chunks pooled over requests, E2EL to
the last chunk; each summary key in milliseconds
(``mean_``, ``median_``, ``std_``, ``p<P>_`` + metric + ``_ms``), the per-request lists in
seconds. Which metrics and percentiles a file holds depends on ``--percentile-metrics`` (default
``ttft,tpot,itl``: no E2EL keys) and ``--metric-percentiles`` (default 99). Older files
(``benchmarks/benchmark_serving.py``) spell the goodput key ``request_goodput:``.
"""

from __future__ import annotations

from typing import Any

from quantbench.exchange.figures import ForeignRun, ForeignStats, count, number

_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and "num_prompts" in data and "request_throughput" in data


def _stats(data: dict[str, Any], metric: str, weighting: str) -> ForeignStats | None:
    mean = number(data.get(f"mean_{metric}_ms"))
    if mean is None:
        return None
    return ForeignStats(
        field=f"*_{metric}_ms",
        mean=mean,
        p50=number(data.get(f"p50_{metric}_ms", data.get(f"median_{metric}_ms"))),
        p90=number(data.get(f"p90_{metric}_ms")),
        p99=number(data.get(f"p99_{metric}_ms")),
        weighting=weighting,
    )


def _load(data: dict[str, Any]) -> str:
    rate = number(data.get("request_rate"))
    conc = data.get("max_concurrency")
    parts = []
    if conc is not None:
        parts.append(f"concurrency {conc}")
    if rate is not None and rate != float("inf"):
        parts.append(f"rate {rate:g}/s (burstiness {number(data.get('burstiness')) or 1:g})")
    return ", ".join(parts) or "all at once (rate inf, no concurrency cap)"


def read(data: dict[str, Any], source: str) -> list[ForeignRun]:
    completed = count(data.get("completed"))
    failed = count(data.get("failed"))
    if failed is None and completed is not None and count(data.get("num_prompts")) is not None:
        failed = count(data["num_prompts"]) - completed  # older files: no `failed` key
    goodput_key = "request_goodput" if "request_goodput" in data else "request_goodput:"
    notes = [
        "TTFT runs to vLLM's first chunk carrying choices, a role-only one included (ours: the "
        "first with content); TPOT is (E2E - that TTFT) / (tokens - 1)"
    ]
    if "mean_e2el_ms" not in data:
        notes.append(
            "no E2E latency: the run did not ask for it (--percentile-metrics without e2el)"
        )
    for metric in _METRICS.values():
        if f"mean_{metric}_ms" in data and f"p90_{metric}_ms" not in data:
            notes.append(f"no p90 of {metric}: not in --metric-percentiles")
            break
    return [
        ForeignRun(
            tool="vllm-bench-serve",
            tool_version=None,  # the file does not say
            source=source,
            label=str(data.get("label") or data.get("date") or "run"),
            model=data.get("model_id"),
            load=_load(data),
            requests=None if completed is None or failed is None else completed + failed,
            completed=completed,
            failed=failed,
            duration_s=number(data.get("duration")),
            request_throughput=number(data.get("request_throughput")),
            output_throughput=number(data.get("output_throughput")),
            goodput=number(data.get(goodput_key)),
            ttft=_stats(data, "ttft", "per request"),
            tpot=_stats(data, "tpot", "per request"),
            itl=_stats(data, "itl", "per chunk"),
            e2e=_stats(data, "e2el", "per request"),
            notes=notes,
        )
    ]
