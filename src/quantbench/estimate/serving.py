"""Latency and throughput per concurrency, and the three concurrency limits.

The serving model is a closed loop: ``B`` clients each send a request (``S`` prompt tokens,
``O`` output tokens) and send the next as soon as one finishes, against an engine that batches
continuously (decode steps of all running requests together, new prompts mixed into steps).

* A decode step for ``B`` requests reads the weights once, each request's KV cache, and
  carries the prompt tokens of requests that arrived meanwhile. While one request decodes its
  ``O - 1`` tokens, the other ``B - 1`` requests each start once, so a step carries on average
  ``(B - 1) * S / (O - 1)`` prompt tokens. Steps are costed at every context the output
  passes through (``S + 1 .. S + O - 1``) and averaged: KV growth counts.
* TTFT is one step carrying the whole prompt beside ``B - 1`` decoding requests, plus waiting
  for other prompts: M/D/1 queueing with prefill utilisation ``rho = B * T_prompt / E2E``,
  capped at all ``B - 1`` other prompts ahead. An assumption: real arrivals are not Poisson.
* An engine that runs at most ``m`` requests at once (``max_batch``: llama.cpp's slots, vLLM's
  ``max_num_seqs``, one for ``transformers serve`` without continuous batching) serves ``B > m``
  clients as ``m`` running and ``B - m`` queued: every figure of a running request is the
  figure at ``m``, throughput stays at ``m``'s, and each request first waits in the queue. In a
  closed loop each client's cycle is ``B / X`` with ``X = m / E2E_m``, so the wait is
  ``E2E_m * (B / m - 1)``, added to TTFT and E2E.
* Where the pair's real server was probed on this machine (``fit``: its bench
  stage's probe, :mod:`quantbench.estimate.step_fit`), its measured costs replace the roofline's times:
  a step of ``k`` sequences costs what the probe measured at 1-4 (interpolated, extended
  beyond by the mean cost per sequence, with context), each prompt token it carries
  ``prefill``, and each request ``request`` more before its first token, plus half a step of
  waiting for the step in progress when others are running. Memory and the bounds stay the
  roofline's.
* A prefix cache (``prefill_len``) computes only the part of each prompt it did not hold; think
  times between turns (``think_s``, mean per request) keep clients away: of ``B`` clients,
  ``B * E2E / (E2E + think)`` have a request in flight on average (solved as a fixed point),
  and output tokens/s is ``B * O / (E2E + think)``.
* Only means are estimated. A roofline has no variance, so no percentiles are invented; the
  ITL of the first and last decode step show the spread KV growth causes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from quantbench.estimate.roofline import Cost, Rates, StepCosts
from quantbench.schemas.roofline import Bound, ConcurrencyLimits, ConcurrencyPoint, PhaseEstimate
from quantbench.schemas.step_fit import StepFit

# Largest concurrency the limit searches consider.
MAX_SEARCH_CONCURRENCY = 1 << 20


@dataclass(frozen=True)
class ServingModel:
    """One variant on one device under one request shape."""

    costs: StepCosts
    rates: Rates
    input_len: int
    output_len: int
    stored_weight_bytes: float
    memory_bytes: float  # usable memory: capacity x utilisation
    max_batch: int | None = None  # requests the engine runs at once (None: as many as come)
    fit: StepFit | None = None  # the pair's probed costs on this machine (None: roofline)
    prefill_len: float | None = None  # prompt tokens computed per request (None: all of them)
    think_s: float = 0.0  # mean think time per request before it is sent (closed loop)

    @property
    def computed_prompt(self) -> float:
        """Prompt tokens a request's prefill computes (what a prefix cache did not hold)."""
        return float(self.input_len if self.prefill_len is None else self.prefill_len)

    def running(self, concurrency: float) -> float:
        """How many of ``concurrency`` clients with a request in flight the engine serves at
        once (a float where think times make the number in flight an average)."""
        if self.max_batch is None:
            return concurrency
        return max(1, min(concurrency, self.max_batch))

    def in_flight(self, clients: int) -> float:
        """Clients with a request in flight on average: all of them without think times, else
        the fixed point of ``B * E2E(b) / (E2E(b) + think)``."""
        if self.think_s <= 0:
            return float(clients)
        busy = float(clients)
        for _ in range(50):
            e2e = self._e2e_s(busy)
            nxt = max(1.0, clients * e2e / (e2e + self.think_s))
            if abs(nxt - busy) < 1e-4:
                break
            busy = 0.5 * (busy + nxt)  # damped: E2E grows with the number in flight
        return busy

    def _e2e_s(self, busy: float) -> float:
        itl = self.itl_s(busy)
        return self.ttft_s(busy, itl) + (self.output_len - 1) * (itl or 0.0)

    def queue_wait_s(self, concurrency: float) -> float:
        """Mean wait in the engine's queue: ``E2E_m * (B / m - 1)`` (zero while B <= m)."""
        m = self.running(concurrency)
        if m >= concurrency:
            return 0.0
        return self._service_s(m) * (concurrency / m - 1)

    def _service_s(self, running: float) -> float:
        """E2E of a request among ``running`` requests served together, without a queue."""
        itl = self._itl_s(running)
        return self._ttft_s(running, itl) + (self.output_len - 1) * (itl or 0.0)

    @property
    def decode_contexts(self) -> np.ndarray:
        """Positions attended by each decode step (the token itself included)."""
        s, o = self.input_len, self.output_len
        return np.arange(s + 1, s + o, dtype=np.float64)

    @property
    def mean_context(self) -> float:
        return self.input_len + self.output_len / 2.0

    def _interference_tokens(self, concurrency: float) -> float:
        if self.output_len <= 1:
            return 0.0
        return (concurrency - 1) * self.computed_prompt / (self.output_len - 1)

    def step_times_s(self, concurrency: float, mixed: bool = True) -> np.ndarray:
        """Seconds of every decode step of a request among those the engine runs at once:
        the probed costs where there are some, else the roofline's."""
        if self.fit is None:
            return np.asarray(self.decode_steps(concurrency, mixed).time(self.rates), float)
        running = self.running(concurrency)
        tokens = self._interference_tokens(running) if mixed else 0.0
        ms = self.fit.decode_ms(running, self.decode_contexts) + self.fit.prefill_ms(tokens)
        return np.asarray(ms, float) / 1e3

    def decode_steps(self, concurrency: float, mixed: bool = True) -> Cost:
        """Cost of every decode step of a request (arrays over the output), among the requests
        the engine runs at once."""
        running = self.running(concurrency)
        prompt_tokens = self._interference_tokens(running) if mixed else 0.0
        return (
            self.costs.weights()
            + self.costs.decode(float(running), self.decode_contexts)
            + self.costs.prefill(prompt_tokens, self.input_len)
        )

    def prompt_alone(self) -> Cost:
        return self.costs.prompt(self.input_len)

    def prefill_phase(self) -> PhaseEstimate:
        cost = self.prompt_alone()
        return _phase(cost, self.rates)

    def decode_phase(self) -> PhaseEstimate | None:
        if self.output_len <= 1:
            return None
        steps = self.decode_steps(1)
        mean = Cost(float(np.mean(steps.flops)), float(np.mean(steps.bytes)))
        phase = _phase(mean, self.rates)
        phase.time_ms = float(np.mean(steps.time(self.rates))) * 1e3
        return phase

    def itl_s(self, concurrency: float) -> float | None:
        return self._itl_s(self.running(concurrency))

    def _itl_s(self, running: float) -> float | None:
        if self.output_len <= 1:
            return None
        return float(np.mean(self.step_times_s(running)))

    def _prompt_s(self) -> float:
        """One prompt's prefill alone (what it adds to the steps that carry it)."""
        if self.fit is not None:
            return self.fit.prefill_ms(self.computed_prompt) / 1e3
        cost = self.costs.weights() + self.costs.prefill(self.computed_prompt, self.input_len)
        return float(cost.time(self.rates))

    def _first_step_s(self, running: float) -> float:
        """From sending a request to its first token, without waiting for other prompts."""
        others = running - 1
        if self.fit is not None:
            fit = self.fit
            ms = fit.request_ms + fit.prefill_ms(self.computed_prompt)
            if others > 0:  # the others' tokens ride along; half a step in progress first
                step = float(fit.decode_ms(running, self.mean_context))
                ms += step - float(fit.decode_ms(1.0, self.mean_context)) + 0.5 * step
            return ms / 1e3
        first_step = (
            self.costs.weights()
            + self.costs.prefill(self.computed_prompt, self.input_len)
            + self.costs.decode(float(others), self.mean_context)
        )
        return float(first_step.time(self.rates))

    def ttft_s(self, concurrency: float, itl_s: float | None = None) -> float:
        """TTFT among the running requests, plus the wait in the engine's queue."""
        running = self.running(concurrency)
        return self._ttft_s(running, itl_s) + self.queue_wait_s(concurrency)

    def _ttft_s(self, concurrency: float, itl_s: float | None = None) -> float:
        others = concurrency - 1
        first = self._first_step_s(concurrency)
        if others <= 0:
            return first
        prompt = self._prompt_s()
        itl = self._itl_s(concurrency) if itl_s is None else itl_s
        e2e_without_wait = first + (self.output_len - 1) * (itl or 0.0)
        rho = concurrency * prompt / e2e_without_wait
        all_ahead = others * prompt
        wait = all_ahead if rho >= 1 else min(rho * prompt / (2 * (1 - rho)), all_ahead)
        return first + wait

    def kv_bytes(self, concurrency: float) -> float:
        """KV cache the running requests hold at most (queued ones hold none)."""
        return (
            self.running(concurrency)
            * (self.input_len + self.output_len)
            * self.costs.kv_bytes_per_token
        )

    def point(self, concurrency: int, ttft_slo_ms: float, itl_slo_ms: float) -> ConcurrencyPoint:
        """All figures with ``concurrency`` clients."""
        if concurrency < 1:
            raise ValueError(f"concurrency {concurrency} must be >= 1")
        busy = self.in_flight(concurrency)
        itl = self.itl_s(busy)
        ttft = self.ttft_s(busy, itl)
        e2e = ttft + (self.output_len - 1) * (itl or 0.0)
        cycle = e2e + self.think_s
        decode_bound: Bound | None = None
        intensity = None
        itl_first = itl_last = itl_plain = None
        if itl is not None:
            times = self.step_times_s(busy)
            itl_first, itl_last = float(times[0]) * 1e3, float(times[-1]) * 1e3
            itl_plain = float(np.mean(self.step_times_s(busy, mixed=False))) * 1e3
            plain = self.decode_steps(busy, mixed=False)
            mean = Cost(float(np.mean(plain.flops)), float(np.mean(plain.bytes)))
            decode_bound = "compute" if mean.compute_bound(self.rates) else "memory"
            intensity = float(mean.intensity())
        kv = self.kv_bytes(busy)
        return ConcurrencyPoint(
            concurrency=concurrency,
            ttft_ms=ttft * 1e3,
            itl_ms=None if itl is None else itl * 1e3,
            itl_first_ms=itl_first,
            itl_last_ms=itl_last,
            itl_decode_only_ms=itl_plain,
            e2e_s=e2e,
            output_tps=concurrency * self.output_len / cycle,
            input_tps=concurrency * self.input_len / cycle,
            request_rate=concurrency / cycle,
            running=round(self.running(busy)),
            queue_wait_ms=self.queue_wait_s(busy) * 1e3,
            decode_bound=decode_bound,
            decode_intensity=intensity,
            kv_cache_gb=kv / 1e9,
            fits_memory=self.stored_weight_bytes + kv <= self.memory_bytes,
            meets_ttft_slo=ttft * 1e3 <= ttft_slo_ms,
            meets_itl_slo=itl is None or itl * 1e3 <= itl_slo_ms,
        )

    def kv_memory_limit(self) -> int:
        free = self.memory_bytes - self.stored_weight_bytes
        per_request = (self.input_len + self.output_len) * self.costs.kv_bytes_per_token
        fitting = max(0, math.floor(free / per_request))
        if self.max_batch is not None and fitting >= self.max_batch:
            return MAX_SEARCH_CONCURRENCY  # the queued requests hold no KV cache
        return fitting

    def decode_compute_bound_from(self) -> int | None:
        """Smallest concurrency whose mean decode step is compute-bound (closed form)."""
        ctx = self.mean_context
        per_seq = self.costs.decode(1.0, ctx)
        weights = self.costs.weights().bytes
        margin = per_seq.flops / self.rates.flops - per_seq.bytes / self.rates.bandwidth
        if margin <= 0:
            return None
        first = max(1, math.ceil(weights / self.rates.bandwidth / margin))
        if self.max_batch is not None and first > self.max_batch:
            return None  # the engine never batches that many
        return first

    def limits(self, ttft_slo_ms: float, itl_slo_ms: float) -> ConcurrencyLimits:
        prefill = _largest_meeting(lambda b: self.ttft_s(b) * 1e3 <= ttft_slo_ms)
        if self.output_len <= 1:
            decode = MAX_SEARCH_CONCURRENCY
        else:
            decode = _largest_meeting(lambda b: (self.itl_s(b) or 0.0) * 1e3 <= itl_slo_ms)
        candidates = {
            "kv_memory": self.kv_memory_limit(),
            "prefill_compute": prefill,
            "decode": decode,
        }
        binding = min(candidates, key=candidates.__getitem__)
        return ConcurrencyLimits(
            **candidates,
            overall=candidates[binding],
            binding=binding,
            decode_compute_bound_from=self.decode_compute_bound_from(),
        )


def _phase(cost: Cost, rates: Rates) -> PhaseEstimate:
    return PhaseEstimate(
        flops=float(cost.flops),
        bytes=float(cost.bytes),
        intensity=float(cost.intensity()),
        bound="compute" if cost.compute_bound(rates) else "memory",
        time_ms=float(cost.time(rates)) * 1e3,
    )


def _largest_meeting(ok: Callable[[int], bool]) -> int:
    """Largest concurrency in [1, MAX_SEARCH_CONCURRENCY] for which a monotone test holds."""
    if not ok(1):
        return 0
    low, high = 1, 2
    while high <= MAX_SEARCH_CONCURRENCY and ok(high):
        low, high = high, high * 2
    high = min(high, MAX_SEARCH_CONCURRENCY + 1)
    while high - low > 1:
        middle = (low + high) // 2
        if ok(middle):
            low = middle
        else:
            high = middle
    return low
