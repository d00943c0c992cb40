"""Read AIPerf's ``profile_export_aiperf.json`` into a :class:`ForeignRun`.

AIPerf (ai-dynamo/aiperf; the file's ``schema_version`` 1.x, measured here with aiperf 0.13.0)
writes each metric at the top level under its tag, as ``{"unit", "avg", "p50", "p90", "p99",
"std", "min", "max", "count"}`` (a scalar only ``unit`` and ``avg``). What its tags measure:

* ``time_to_first_token``: to the first non-empty response chunk (ms): our TTFT;
* ``inter_token_latency``: per request (request latency - TTFT) / (output tokens - 1): our
  **TPOT**, not our ITL. AIPerf counts a request's output tokens by tokenizing its text with
  the client's tokenizer (``output_sequence_length``), not from the server's ``usage``; where
  the two differ (``osl_mismatch_count``) its figure is divided by another count than ours;
* ``inter_chunk_latency``: the gaps between chunks, over chunks: our ITL;
* ``request_latency``: to the last chunk (ms): our E2E;
* ``goodput``: requests per second meeting every ``--goodput`` SLO (its tags, display units).
"""

from __future__ import annotations

from typing import Any

from quantbench.exchange.figures import ForeignRun, ForeignStats, count, number

_SCALE = {"ms": 1.0, "sec": 1000.0, "s": 1000.0, "us": 0.001, "ns": 1e-6}


def looks_like(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("request_latency"), dict)
        and "unit" in data["request_latency"]
    )


def _avg(data: dict[str, Any], tag: str) -> float | None:
    block = data.get(tag)
    return number(block.get("avg")) if isinstance(block, dict) else None


def _stats(data: dict[str, Any], tag: str, weighting: str) -> ForeignStats | None:
    block = data.get(tag)
    if not isinstance(block, dict) or number(block.get("avg")) is None:
        return None
    scale = _SCALE.get(str(block.get("unit")))
    if scale is None:
        raise ValueError(f"AIPerf's {tag} is in {block.get('unit')!r}, not a time unit")

    def ms(key: str) -> float | None:
        x = number(block.get(key))
        return None if x is None else x * scale

    return ForeignStats(
        field=tag, mean=ms("avg"), p50=ms("p50"), p90=ms("p90"), p99=ms("p99"), weighting=weighting
    )


def _load(config: dict[str, Any]) -> str:
    phases = [p for p in config.get("phases") or [] if p.get("kind") == "profiling"]
    loadgen = phases[0] if phases else config.get("loadgen") or {}
    parts = []
    if loadgen.get("concurrency") is not None:
        parts.append(f"concurrency {loadgen['concurrency']}")
    if loadgen.get("request_rate") is not None:
        parts.append(f"rate {loadgen['request_rate']}/s")
    return ", ".join(parts) or "as the file's input_config says"


def read(data: dict[str, Any], source: str) -> list[ForeignRun]:
    config = data.get("input_config") or {}
    models = (config.get("models") or {}).get("items") or []
    names = config.get("endpoint", {}).get("model_names") or [m.get("name") for m in models]
    completed = count(_avg(data, "request_count"))
    failed = count(_avg(data, "error_request_count")) or 0
    notes = []
    mismatched = count(_avg(data, "osl_mismatch_count"))
    client_osl, server_osl = (
        _avg(data, "output_sequence_length"),
        _avg(data, "usage_completion_tokens"),
    )
    if mismatched and client_osl and server_osl:
        notes.append(
            f"AIPerf counted output tokens with its client tokenizer ({client_osl:g} a request on "
            f"average) where the server's usage said {server_osl:g} ({mismatched} requests): "
            f"in server tokens its TPOT is {(client_osl - 1) / max(server_osl - 1, 1):.2f}x and "
            f"its output tokens/s {server_osl / client_osl:.2f}x the figures shown"
        )
    slos = config.get("slos") or (config.get("input") or {}).get("goodput")
    if slos:
        notes.append(f"goodput under AIPerf's SLOs {slos} (its metric tags, display units)")
    return [
        ForeignRun(
            tool="aiperf",
            tool_version=data.get("aiperf_version"),
            source=source,
            label=str(data.get("benchmark_id") or "profiling"),
            model=names[0] if names else None,
            load=_load(config),
            requests=None if completed is None else completed + failed,
            completed=completed,
            failed=failed,
            duration_s=_avg(data, "benchmark_duration"),
            request_throughput=_avg(data, "request_throughput"),
            output_throughput=_avg(data, "output_token_throughput"),
            goodput=_avg(data, "goodput"),
            ttft=_stats(data, "time_to_first_token", "per request"),
            tpot=_stats(data, "inter_token_latency", "per request"),
            itl=_stats(data, "inter_chunk_latency", "per chunk"),
            e2e=_stats(data, "request_latency", "per request"),
            notes=notes,
        )
    ]
