"""A served pair's step costs, fitted from a short probe of its real server (made by its
bench stage, on its own server: :mod:`quantbench.estimate.pair_probe`).

The roofline costs a step from the device's rates, which on a CPU leaves out what dominates: an
engine's dequantising dot products at one thread are compute-bound per sequence, its HTTP front
and sampling cost time per request, and a batched step costs far more than one read of the
weights (Q4_K_M on llama.cpp: 19.6 ms per step at one stream, about 39 at four). A probe of the
engine itself measures the few figures that decide every point the bench will run:

* ``TTFT(P) = request + P * prefill`` from requests alone at several prompt lengths (``P``: the
  prompt tokens the engine computed, those its prefix cache served left out): the cost per
  prompt token and the per-request cost around it (HTTP, chat template, tokenising, the step
  that emits the first token);
* the decode step of ``k`` sequences from TPOT alone at each length (the cost of one more
  position of context per sequence) and TPOT of 2, 3 and 4 requests sent together (how much of
  a step its sequences share: the weights read once, the fixed overhead; and what each adds: its
  share of the dequantising dot products, its attention, its sampling). Between the batches
  measured the step is interpolated; beyond them it grows by the mean cost per sequence
  (``shared + k * own``).

The fit is least squares on those few figures, with every cost clamped at zero (a probe too noisy
to show a cost says so in ``notes`` rather than predicting a negative time). A pair whose engine
runs one request at a time gives no batched figure: ``own`` is then the whole step
(``batch_measured`` 1), so it is never extrapolated to sharing it did not show.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from quantbench.schemas.step_fit import ProbeRequest, StepFit


class ProbeError(ValueError):
    """The probe's figures cannot be fitted (what is missing is said)."""


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line; needs two distinct x."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(intercept), float(slope)


def cache_block(requests: Sequence[ProbeRequest]) -> int:
    """The prefix cache's granularity from the repeats: a cache that served (nearly) the whole
    shared prefix works per token (1); one that served ``c`` tokens of it works in blocks of
    ``c`` (a shared prefix shorter than two blocks, as the probe's is); one that served none,
    in blocks longer than the prefix. No repeat or no cache: 1 (nothing to round)."""
    repeats = [r for r in requests if r.shared_prefix is not None]
    if not repeats:
        return 1
    r = max(repeats, key=lambda r: r.shared_prefix or 0)
    shared = r.shared_prefix or 0
    if r.cached_tokens >= shared - 8:  # the last few tokens differ by the template's tail
        return 1
    return r.cached_tokens if r.cached_tokens > 0 else shared + 1


def fit_steps(requests: Sequence[ProbeRequest]) -> StepFit:
    """Fit :class:`StepFit` to a probe: requests alone at two or more prompt lengths, and
    (where the engine batches) requests sent together."""
    alone = [r for r in requests if r.concurrency == 1]
    lengths = {r.prefilled for r in alone}
    if len(lengths) < 2:
        raise ProbeError(
            f"the probe needs requests alone at two prompt lengths at least; it has "
            f"{len(alone)} alone at {sorted(lengths) or 'no'} prompt tokens computed"
        )
    notes: list[str] = []
    cached = statistics.median(r.cached_tokens for r in alone if r.shared_prefix is None)
    block = cache_block(alone)
    request_ms, prefill = _line([r.prefilled for r in alone], [r.ttft_ms for r in alone])
    if prefill < 0:
        notes.append(f"TTFT fell with prompt length ({prefill:.3f} ms/token): taken as 0")
        prefill, request_ms = 0.0, statistics.median(r.ttft_ms for r in alone)
    if request_ms < 0:
        notes.append(f"TTFT intercept {request_ms:.1f} ms: taken as 0")
        request_ms = 0.0

    step1_at0, per_context = _line([r.mean_context for r in alone], [r.tpot_ms for r in alone])
    if per_context < 0:
        notes.append(f"TPOT fell with context ({per_context * 1e3:.1f} us/position): taken as 0")
        per_context = 0.0
        step1_at0 = statistics.median(r.tpot_ms for r in alone)

    together = [r for r in requests if r.concurrency > 1]
    if not together:
        reference = statistics.median(r.mean_context for r in alone)
        return StepFit(
            request_ms=request_ms,
            prefill_ms_per_token=prefill,
            shared_step_ms=0.0,
            own_step_ms=max(step1_at0 + per_context * reference, 0.0),
            context_ms_per_token=per_context,
            reference_context=reference,
            batch_measured=1,
            cached_prompt_tokens=cached,
            cache_block=block,
            notes=[*notes, "no batched requests: each running sequence costs a whole step"],
        )
    reference = statistics.median(r.mean_context for r in together)
    step_1 = step1_at0 + per_context * reference
    steps = {1: step_1}
    for k in sorted({r.concurrency for r in together}):
        steps[k] = statistics.median(r.tpot_ms for r in together if r.concurrency == k)
    k = max(steps)
    step_k = steps[k]
    own = (step_k - step_1) / (k - 1)
    if own < 0:
        notes.append(
            f"{k} sequences stepped faster than one ({step_k:.1f} against {step_1:.1f} ms): "
            "each sequence's own cost taken as 0"
        )
        own = 0.0
    shared = step_1 - own
    if shared < 0:
        notes.append(f"the shared part came out {shared:.1f} ms: taken as 0")
        shared, own = 0.0, step_k / k
    return StepFit(
        request_ms=request_ms,
        prefill_ms_per_token=prefill,
        shared_step_ms=shared,
        own_step_ms=own,
        context_ms_per_token=per_context,
        reference_context=reference,
        batch_measured=k,
        batched_step_ms={str(n): max(v, 0.0) for n, v in sorted(steps.items())},
        cached_prompt_tokens=cached,
        cache_block=block,
        notes=notes,
    )
