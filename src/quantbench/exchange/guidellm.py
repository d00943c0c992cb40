"""Read a GuideLLM report (``guidellm run --output kind=json``) into :class:`ForeignRun` rows.

GuideLLM (vllm-project/guidellm; measured here with 0.8.1, ``metadata.version`` 2) writes one
entry of ``benchmarks`` per strategy it ran (a sweep holds several), each with ``metrics.<name>``
split by request status (``successful``, ``errored``, ``incomplete``, ``total``), each a
distribution ``{mean, median, std_dev, count, percentiles: {p50, p90, p99, ...}}``. Read from the
``successful`` requests. What its names measure (``schemas/request_stats.py``):

* ``time_to_first_token_ms``: our TTFT;
* ``inter_token_latency_ms``: per request (last token - first token) / (tokens - 1): our
  **TPOT**, its statistics weighted by each request's tokens - 1 (a distribution over tokens);
* ``time_per_output_token_ms``: (last token - request start) / tokens, the first token's time
  included: none of ours (llm-d calls it "normalized TPOT"); left out, and a note says so;
* ``request_latency`` (seconds): our E2E;
* ``output_tokens_per_second``, ``requests_per_second``: the mean of a time-weighted
  instantaneous rate over the measured window.

GuideLLM has no pooled chunk gaps (our ITL).
"""

from __future__ import annotations

from typing import Any

from quantbench.exchange.figures import ForeignRun, ForeignStats, count, number


def looks_like(data: Any) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        return False
    first = data["benchmarks"][0] if data["benchmarks"] else {}
    return isinstance(first, dict) and "metrics" in first


def _successful(metrics: dict[str, Any], name: str) -> dict[str, Any] | None:
    block = metrics.get(name)
    if not isinstance(block, dict):
        return None
    ok = block.get("successful")
    return ok if isinstance(ok, dict) and number(ok.get("mean")) is not None else None


def _stats(metrics: dict[str, Any], name: str, scale: float, weighting: str) -> ForeignStats | None:
    ok = _successful(metrics, name)
    if ok is None:
        return None
    pct = ok.get("percentiles") or {}

    def scaled(value: Any) -> float | None:
        x = number(value)
        return None if x is None else x * scale

    return ForeignStats(
        field=f"{name}.successful",
        mean=scaled(ok.get("mean")),
        p50=scaled(pct.get("p50", ok.get("median"))),
        p90=scaled(pct.get("p90")),
        p99=scaled(pct.get("p99")),
        weighting=weighting,
    )


def _load(strategy: dict[str, Any]) -> str:
    kind = strategy.get("type_", "?")
    if strategy.get("streams") is not None:
        return f"concurrency {strategy['streams']} ({kind})"
    if strategy.get("rate") is not None:
        return f"rate {strategy['rate']}/s ({kind})"
    return str(kind)


def read(data: dict[str, Any], source: str) -> list[ForeignRun]:
    version = (data.get("metadata") or {}).get("guidellm_version")
    backend = ((data.get("config") or {}).get("spec") or {}).get("backend") or {}
    runs = []
    for index, bench in enumerate(data["benchmarks"]):
        metrics = bench.get("metrics") or {}
        totals = metrics.get("request_totals") or bench.get("request_totals") or {}
        strategy = (bench.get("config") or {}).get("strategy") or bench.get("args", {}).get(
            "strategy", {}
        )
        rps = _successful(metrics, "requests_per_second")
        tokens = _successful(metrics, "output_tokens_per_second")
        notes = [
            "time_per_output_token_ms (GuideLLM's TPOT) includes the first token's time: "
            "not our TPOT, left out",
            "no pooled chunk gaps (our ITL) in a GuideLLM report",
            "TPOT (GuideLLM's inter_token_latency_ms) is weighted by each request's tokens - 1",
        ]
        completed, failed = count(totals.get("successful")), count(totals.get("errored"))
        runs.append(
            ForeignRun(
                tool="guidellm",
                tool_version=version,
                source=source,
                label=f"{index}: {_load(strategy)}",
                model=backend.get("model"),
                load=_load(strategy),
                requests=count(totals.get("total")),
                completed=completed,
                failed=failed,
                duration_s=number(bench.get("duration")),
                request_throughput=number(rps.get("mean")) if rps else None,
                output_throughput=number(tokens.get("mean")) if tokens else None,
                goodput=None,
                ttft=_stats(metrics, "time_to_first_token_ms", 1.0, "per request"),
                tpot=_stats(metrics, "inter_token_latency_ms", 1.0, "per token (tokens - 1)"),
                itl=None,
                e2e=_stats(metrics, "request_latency", 1000.0, "per request"),
                notes=notes,
            )
        )
    return runs
