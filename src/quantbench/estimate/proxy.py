"""A stand-in measurement until the engines exist: a plain Hugging Face ``generate`` loop.

Batch 1, greedy, a fixed random prompt, a fixed torch thread count. TTFT is the time of a
one-token generation; TPOT is the extra time of ``O - 1`` more tokens divided by ``O - 1``,
so prompt processing does not leak into it. This is a proxy for the transformers engine at
concurrency 1, not the engine's figure: no server, no HTTP, no scheduler, no streaming.
"""

from __future__ import annotations

from pathlib import Path

from quantbench.engines.transformers import decode_timing
from quantbench.estimate.compare import MeasuredPoint
from quantbench.estimate.errors import EstimateInputError

PROXY_ENGINE = "hf-generate-proxy"
# Seed of the random prompt, so repeated runs time the same work.
PROMPT_SEED = 0


def measure_hf_generate(
    model_dir: Path,
    variant: str = "bf16",
    input_len: int = 128,
    output_len: int = 64,
    threads: int = 1,
    repeats: int = 2,
) -> MeasuredPoint:
    """Time greedy generation at batch 1 and return it as a (proxy) measured point."""
    if output_len < 2:
        raise EstimateInputError(f"output_len={output_len} must be >= 2 to time decode steps")
    import torch
    from transformers import AutoModelForCausalLM

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
        generator = torch.Generator().manual_seed(PROMPT_SEED)
        vocab = model.config.vocab_size
        prompt = torch.randint(0, vocab, (1, input_len), generator=generator)
        first, tpot = decode_timing(model, prompt, model.config.eos_token_id, output_len, repeats)
    finally:
        torch.set_num_threads(previous_threads)
    return MeasuredPoint(
        variant=variant,
        engine=PROXY_ENGINE,
        concurrency=1,
        ttft_ms=first * 1e3,
        tpot_ms=tpot * 1e3,
        output_tps=output_len / (first + tpot * (output_len - 1)),
        input_len=input_len,
        output_len=output_len,
        hardware="this",
        setting=f"generate, batch 1, {threads} torch thread(s)",
        proxy=True,
    )
