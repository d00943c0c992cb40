"""The probe's fit on synthetic measurements: it recovers the costs it was made from."""

from __future__ import annotations

import random

import pytest

from quantbench.estimate.step_fit import ProbeError, fit_steps
from quantbench.schemas.step_fit import ProbeRequest, StepFit

OUT = 32


def probe(
    request_ms: float,
    prefill_ms: float,
    steps: dict[int, float],
    context_ms: float = 0.0,
    cached: int = 0,
    noise: float = 0.0,
    seed: int = 0,
) -> list[ProbeRequest]:
    """Requests alone at three prompt lengths (twice) and 2..k together, as the probe sends
    them, timed by known costs (``steps``: a step of k sequences at 59 positions)."""
    rng = random.Random(seed)

    def jitter(x: float) -> float:
        return x * (1 + rng.uniform(-noise, noise))

    out = []
    for _ in range(2):
        for prompt in (43, 113, 218):
            ctx = prompt + OUT / 2
            out.append(
                ProbeRequest(
                    concurrency=1, prompt_tokens=prompt, cached_tokens=cached, output_tokens=OUT,
                    ttft_ms=jitter(request_ms + prefill_ms * (prompt - cached)),
                    tpot_ms=jitter(steps[1] + context_ms * (ctx - 59)),
                )
            )  # fmt: skip
    for k in sorted(steps):
        if k == 1:
            continue
        out += [
            ProbeRequest(
                concurrency=k, prompt_tokens=43, cached_tokens=cached, output_tokens=OUT,
                ttft_ms=jitter(k * 100.0), tpot_ms=jitter(steps[k] + k * context_ms * (59 - 59)),
            )
            for _ in range(k)
        ]  # fmt: skip
    return out


def test_the_fit_recovers_request_prefill_and_step_costs() -> None:
    # llama.cpp's Q8_0 at one thread, as measured: the step is flat from 3 to 4 sequences
    steps = {1: 21.0, 2: 33.3, 3: 42.3, 4: 42.5}
    fit = fit_steps(probe(25.0, 3.5, steps, context_ms=0.01, cached=26))
    assert fit.request_ms == pytest.approx(25.0, abs=0.01)
    assert fit.prefill_ms_per_token == pytest.approx(3.5, abs=1e-4)
    assert fit.context_ms_per_token == pytest.approx(0.01, abs=1e-6)
    assert fit.cached_prompt_tokens == 26
    assert fit.batch_measured == 4
    for k, ms in steps.items():  # the measured steps themselves, not a line through them
        assert fit.step_at_reference(k) == pytest.approx(ms, abs=1e-6)
    assert fit.step_at_reference(2.5) == pytest.approx((33.3 + 42.3) / 2)
    # beyond the largest batch measured: the mean cost per sequence, (42.5 - 21) / 3
    assert fit.step_at_reference(8) == pytest.approx(42.5 + 4 * (42.5 - 21.0) / 3)
    # a longer context costs each sequence its positions
    assert float(fit.decode_ms(2, 159.0)) == pytest.approx(33.3 + 2 * 100 * 0.01)
    assert fit.prefill_ms(10) == pytest.approx(35.0)


def test_the_fit_holds_within_its_noise() -> None:
    steps = {1: 19.6, 2: 30.0, 3: 36.0, 4: 39.0}
    fit = fit_steps(probe(30.0, 3.0, steps, noise=0.03, seed=7))
    assert fit.prefill_ms_per_token == pytest.approx(3.0, rel=0.1)
    for k, ms in steps.items():
        assert fit.step_at_reference(k) == pytest.approx(ms, rel=0.05)


def test_an_engine_that_runs_one_request_at_a_time_shares_nothing() -> None:
    fit = fit_steps(probe(46.0, 2.9, {1: 53.0}))
    assert fit.batch_measured == 1 and fit.batched_step_ms == {}
    assert fit.step_at_reference(1) == pytest.approx(53.0)
    assert fit.step_at_reference(3) == pytest.approx(3 * 53.0)  # never sharing it did not show
    assert any("no batched requests" in n for n in fit.notes)


def test_a_noisy_probe_clamps_negative_costs_and_says_so() -> None:
    fit = fit_steps(probe(-20.0, 3.0, {1: 20.0, 2: 18.0}))
    assert fit.request_ms == 0.0
    assert fit.own_step_ms == 0.0
    assert any("intercept" in n for n in fit.notes)
    assert any("faster than one" in n for n in fit.notes)


def test_one_prompt_length_cannot_be_fitted() -> None:
    alone = [r for r in probe(25.0, 3.5, {1: 21.0}) if r.prompt_tokens == 43]
    with pytest.raises(ProbeError, match="two prompt lengths"):
        fit_steps(alone)


def test_the_fit_round_trips_through_json() -> None:
    fit = fit_steps(probe(25.0, 3.5, {1: 21.0, 2: 33.3}))
    assert StepFit.model_validate_json(fit.model_dump_json()) == fit


def _with_repeat(requests: list[ProbeRequest], shared: int, cached: int) -> list[ProbeRequest]:
    repeat = ProbeRequest(
        concurrency=1, prompt_tokens=shared + 12, cached_tokens=cached, shared_prefix=shared,
        output_tokens=OUT, ttft_ms=30.0, tpot_ms=21.0,
    )  # fmt: skip
    return [*requests, repeat]


@pytest.mark.parametrize(
    ("cached", "block"),
    [
        (200, 1),  # llama.cpp: the whole shared prefix from its slot
        (196, 1),  # within the template's tail
        (128, 128),  # vLLM on a CPU: one whole block of 128 of a 204-token prefix
        (0, 205),  # blocks longer than the prefix: nothing of it served
    ],
)
def test_a_repeat_shows_the_prefix_cache_s_block(cached: int, block: int) -> None:
    requests = _with_repeat(probe(25.0, 3.5, {1: 21.0, 2: 30.0}), shared=204, cached=cached)
    fit = fit_steps(requests)
    assert fit.cache_block == block
    # the template's head is read from the prompts of their own, not from the repeat
    assert fit.cached_prompt_tokens == 0


def test_without_a_repeat_the_cache_is_taken_per_token() -> None:
    assert fit_steps(probe(25.0, 3.5, {1: 21.0})).cache_block == 1
