"""The named workloads, their shapes, and where each shape comes from.

Lengths are in tokens at ``length_scale: 1``, where they follow the published statistics cited
here; a small CPU run scales them down (params.yaml's ``length_scale``), keeping the shape (the
ratios between input and output, and the spread). Each workload also carries the SLO profile it is
judged by: interactive traffic by time to first token and time per output token, batch-like
traffic by throughput and end-to-end time. docs/LOAD.md has the table with the citations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quantbench.slo import Slo
from quantbench.workloads.generate import LengthDist, MultiTurn, Rag, Shape, SingleTurn


@dataclass(frozen=True)
class NamedWorkload:
    name: str
    shape: Shape
    slo: Slo
    """The SLO profile this traffic is judged by."""
    source: str
    """Where the shape comes from (what is published, what is assumed)."""
    load: list[dict[str, Any]] = field(default_factory=list)
    """Default load points (params.yaml may replace them)."""


CHAT = NamedWorkload(
    "chat",
    SingleTurn(
        input=LengthDist(mean=161, sigma=1.0, minimum=4, maximum=2048),
        output=LengthDist(mean=338, sigma=0.8, minimum=4, maximum=2048),
        instruction="Summarise the following text.",
    ),
    slo=Slo("ttft:p95<=2s; tpot:p50<=150ms; error_rate<=0.05"),
    source=(
        "ShareGPT conversations as vLLM's paper reports them: mean 161 input and 338 output "
        "tokens (Kwon et al., 'Efficient Memory Management for Large Language Model Serving with "
        "PagedAttention', SOSP 2023, arXiv:2309.06180). Log-normal spreads (sigma 1.0 in, 0.8 "
        "out) are assumed: the paper gives means, not shapes."
    ),
    load=[{"kind": "concurrency", "concurrency": 1}, {"kind": "concurrency", "concurrency": 4}],
)

RAG = NamedWorkload(
    "rag",
    Rag(
        documents=3,
        document=LengthDist(mean=480, sigma=0.3, minimum=16),
        question=LengthDist(mean=20, sigma=0.3, minimum=4),
        output=LengthDist(mean=48, sigma=0.5, minimum=4),
    ),
    slo=Slo("ttft:p95<=5s; e2e:p95<=15s; error_rate<=0.05"),
    source=(
        "Long prompts, short answers, like the 'coding' trace of Azure's LLM inference dataset "
        "2023 (median 1500 input, 13 output tokens; Patel et al., 'Splitwise', ISCA 2024, "
        "arXiv:2311.18677): three documents of ~480 tokens and a question (~1460 tokens in), "
        "answers of ~48 tokens (GuideLLM's rag preset answers longer, 512)."
    ),
    load=[{"kind": "concurrency", "concurrency": 1}, {"kind": "concurrency", "concurrency": 2}],
)

LONG_GENERATION = NamedWorkload(
    "long-generation",
    SingleTurn(
        input=LengthDist(mean=64, sigma=0.5, minimum=4),
        output=LengthDist(mean=1024, sigma=0.3, minimum=16, maximum=4096),
        instruction="Write a long, detailed report about the following notes.",
    ),
    slo=Slo("tpot:p50<=100ms; tpot:p95<=200ms; error_rate<=0.05"),
    source=(
        "Short prompts, long outputs: decode-bound traffic (reports, code generation). Lengths "
        "are a choice for the decode regime, not a published trace; judged on time per token, "
        "which is what such users wait on."
    ),
    load=[{"kind": "concurrency", "concurrency": 1}, {"kind": "concurrency", "concurrency": 4}],
)

MULTI_TURN = NamedWorkload(
    "multi-turn",
    MultiTurn(
        turns=LengthDist(mean=3, sigma=0.4, minimum=2, maximum=8),
        user=LengthDist(mean=70, sigma=0.8, minimum=4),
        output=LengthDist(mean=215, sigma=0.8, minimum=4, maximum=1024),
        think_s=LengthDist(mean=5.0, sigma=0.5, minimum=0),
        system=500,
    ),
    slo=Slo("ttft:p95<=2s; tpot:p50<=150ms; error_rate<=0.05"),
    source=(
        "Per turn as LMSYS-Chat-1M reports: 69.5 tokens per user message, 214.5 per response, "
        "2.0 turns per conversation on average (Zheng et al., arXiv:2309.11998); here 3 turns "
        "(2 to 8), so a history is resent at least twice. A 500-token system prompt every user "
        "shares, as in vLLM's multi-turn benchmark (benchmarks/multi_turn). Think times "
        "(log-normal, mean 5 s) are an assumption: no published distribution was found."
    ),
    load=[{"kind": "concurrency", "concurrency": 2}, {"kind": "concurrency", "concurrency": 4}],
)

BURSTY = NamedWorkload(
    "bursty",
    CHAT.shape,
    slo=CHAT.slo,
    source=(
        "Chat lengths arriving in bursts: gamma-distributed gaps of shape 0.25 (coefficient of "
        "variation 2; BurstGPT found Azure OpenAI arrivals burstier than Poisson and better fit "
        "by a gamma distribution, Wang et al., arXiv:2401.17644), after a ramp."
    ),
    load=[{"kind": "rate", "rate": 1.0, "burstiness": 0.25, "ramp_s": 10}],
)

NAMED: dict[str, NamedWorkload] = {
    w.name: w for w in (CHAT, RAG, LONG_GENERATION, MULTI_TURN, BURSTY)
}
