"""Each bench run as an llm-d benchmark report, version 0.2.

llm-d-benchmark's comparison tools read its "benchmark report" (``llmdbenchmark/analysis/
benchmark_report/`` in llm-d/llm-d-benchmark: ``schema_v0_2.py`` and ``br_v0_2_json_schema.json``,
read at commit 8bc9f1dd, v0.8.0-15). One report is one measured run: here one repeat of one load
point of one server setting of a bench pair (its ``summary.json`` and ``records.jsonl``).

Where our figures go (the report's own definitions, in its schema's field descriptions):

* TTFT -> ``latency.time_to_first_token`` (ms);
* TPOT, per request (E2E - TTFT) / (tokens - 1) -> ``latency.time_per_output_token``
  ("excluding first", ms/token);
* ITL, chunk gaps pooled over requests -> ``latency.inter_token_latency`` (ms/token), as
  llm-d's own converter files ``vllm bench serve``'s ITL;
* E2E -> ``latency.request_latency`` (ms); ``normalized_time_per_output_token`` (first token
  included) is left out: we do not measure it;
* window output tokens/s, completed requests/s, prompt + output tokens/s -> ``throughput``
  (their ``mean``: one figure a run; its interval stays in our own files);
* measured requests, failed, not served -> ``requests.total``, ``failures``, ``incomplete``.

Percentiles keep their names (``p99.9`` -> ``p99p9``); statistics the report has no field for
(our intervals, SLO verdicts, checks) stay in quantbench's files. Unset fields are left out, as
llm-d's own writer does.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from quantbench.load.records import RequestRecord
from quantbench.schemas.session import LatencyStats, PointResult, SessionSummary

VERSION = "0.2"
_PERCENTILES = {
    "p0.1": "p0p1", "p1": "p1", "p5": "p5", "p10": "p10", "p25": "p25", "p50": "p50",
    "p75": "p75", "p90": "p90", "p95": "p95", "p99": "p99", "p99.9": "p99p9",
}  # fmt: skip


def _statistics(stats: LatencyStats | None, units: str) -> dict[str, Any] | None:
    if stats is None:
        return None
    out: dict[str, Any] = {
        "units": units,
        "mean": stats.mean_ms,
        "stddev": stats.std_ms,
        "min": stats.min_ms,
        "max": stats.max_ms,
    }
    for ours, theirs in _PERCENTILES.items():
        if ours in stats.percentiles_ms:
            out[theirs] = stats.percentiles_ms[ours]
    out.setdefault("p50", stats.median_ms)
    return out


def _lengths(values: Sequence[int]) -> dict[str, Any] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "units": "count",
        "mean": statistics.fmean(ordered),
        "min": ordered[0],
        "p50": statistics.median(ordered),
        "max": ordered[-1],
    }


def _sequence(values: Sequence[int]) -> dict[str, Any]:
    if not values:
        return {"distribution": "other", "value": 0}
    fixed = min(values) == max(values)
    out: dict[str, Any] = {
        "distribution": "fixed" if fixed else "other",
        "value": statistics.fmean(values),
    }
    if not fixed:
        out.update(std_dev=statistics.pstdev(values), min=min(values), max=max(values))
    return out


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat().replace("+00:00", "Z")


def _args(command: Sequence[str]) -> dict[str, Any]:
    """A command line as llm-d's ``native.args``: each ``--flag`` with its value (None alone)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(command):
        word = command[i]
        if word.startswith("-"):
            nxt = command[i + 1] if i + 1 < len(command) else None
            if nxt is not None and not nxt.startswith("--"):
                out[word] = nxt
                i += 2
                continue
            out[word] = None
        i += 1
    return out


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def report(
    summary: SessionSummary,
    point: PointResult,
    records: Sequence[RequestRecord],
    *,
    label: str,
    command: Sequence[str] = (),
    env: dict[str, str] | None = None,
    engine_version: str | None = None,
    accelerator: str = "cpu",
    quantbench_version: str = "unknown",
) -> dict[str, Any]:
    """One run as a version-0.2 benchmark report (a JSON-able dict)."""
    measured = [
        r
        for r in records
        if r.point == point.point and r.phase == "measured" and r.status == "completed"
    ]
    prompt_lens = [r.prompt_tokens for r in measured if r.prompt_tokens is not None]
    output_lens = [r.output_tokens for r in measured if r.output_tokens is not None]
    window = point.window
    uid = hashlib.sha256(f"{label}@{point.started_at}".encode()).hexdigest()[:32]
    shape = point.shape
    workload = summary.workload
    source = (workload.get("prompts") or {}).get("source")
    load_standard: dict[str, Any] = {
        "tool": "quantbench",
        "tool_version": quantbench_version,
        "source": "random" if source == "random" else "sampled" if source else "unknown",
        "input_seq_len": _sequence(prompt_lens),
        "output_seq_len": _sequence(output_lens) if output_lens else None,
    }
    if shape.get("kind") == "concurrency":
        load_standard["concurrency"] = shape.get("concurrency")
    elif shape.get("kind") == "rate":
        load_standard["rate_qps"] = shape.get("rate")
        load_standard["concurrency"] = shape.get("max_concurrency")
    engine = {
        "metadata": {
            "schema_version": "0.0.1",
            "label": label.split("/", 1)[0],
            "cfg_id": hashlib.sha256(json.dumps(list(command)).encode()).hexdigest()[:32],
        },
        "standardized": {
            "kind": "inference_engine",
            "tool": summary.engine,
            "tool_version": engine_version or "unknown",
            "role": "replica",
            "replicas": 1,
            "model": {"name": summary.model},
            "accelerator": {"model": accelerator, "count": 1, "parallelism": {}},
        },
        "native": {"args": _args(command), "envars": env or None},
    }
    doc = {
        "version": VERSION,
        "run": {
            "uid": uid,
            "description": f"quantbench bench run {label}",
            "time": {
                "start": _iso(window.started_at_wall),
                "end": _iso(window.started_at_wall + point.duration_s),
                "duration": f"PT{point.duration_s:.6f}S",
            },
            "keywords": ["quantbench", summary.engine],
        },
        "scenario": {
            "stack": [engine],
            "load": {
                "metadata": {"schema_version": "0.0.1", "description": point.point},
                "standardized": load_standard,
                "native": {"config": workload},
            },
        },
        "results": {
            "request_performance": {
                "aggregate": {
                    "requests": {
                        "total": point.requests,
                        "failures": point.failed,
                        "incomplete": point.not_served,
                        "input_length": _lengths(prompt_lens),
                        "output_length": _lengths(output_lens),
                    },
                    "latency": {
                        "time_to_first_token": _statistics(point.ttft, "ms"),
                        "time_per_output_token": _statistics(point.tpot, "ms/token"),
                        "inter_token_latency": _statistics(point.itl, "ms/token"),
                        "request_latency": _statistics(point.e2e, "ms"),
                    },
                    "throughput": {
                        "output_token_rate": {"units": "tokens/s", "mean": point.output_throughput},
                        "total_token_rate": {
                            "units": "tokens/s",
                            "mean": point.total_token_throughput,
                        },
                        # our total is prompt tokens' rate + the window's output rate
                        "input_token_rate": {
                            "units": "tokens/s",
                            "mean": point.total_token_throughput - point.output_throughput,
                        },
                        "request_rate": {"units": "queries/s", "mean": point.request_throughput},
                    },
                }
            }
        },
    }
    return dict(_drop_none(doc))
