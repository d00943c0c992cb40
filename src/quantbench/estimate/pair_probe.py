"""Probe one bench pair's real server for what its requests and steps cost, for
:mod:`quantbench.estimate.step_fit`. The bench stage does it on its own server, at the sweep's
setting that batches most, before its load points (``reports/bench/<pair>/probe.json``): the
probe costs no server start of its own.

The warmed-up server is sent greedy requests of a fixed output length (``ignore_eos`` or the
engine's equivalent): alone at three prompt lengths, ``repeats`` times each, the longest once
more with a line added (how much of a shared prefix the prefix cache serves, and in what
blocks), then 2, 3, ... ``k`` short ones together, where ``k`` is the setting's batch limit up
to ``estimate.probe.max_batch`` (4: enough to show how a step's cost splits between what its
sequences share and what each adds, few enough to stay within a CPU's batch sizes). About ten
seconds of requests per pair, on a CPU or a GPU alike (the record names the GPU the server
computed on, and the estimate uses a fit only on that device). Nothing here is a benchmark: the
figures feed a model that the bench's own measurements are then held against (``report``: the
±25 % planning band).
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from quantbench.accelerator import DEVICE_ENV, resolve_device
from quantbench.engines.server import ServerError
from quantbench.estimate import machine
from quantbench.estimate.hardware import this_gpu
from quantbench.estimate.spec import ProbeSettings
from quantbench.estimate.step_fit import ProbeError, fit_steps
from quantbench.load.records import RequestRecord
from quantbench.load.requests import body_rules, turn_body
from quantbench.schemas.machine import PairCalibration
from quantbench.schemas.step_fit import ProbeRequest, StepFit

if TYPE_CHECKING:
    from quantbench.accelerator import Gpu
    from quantbench.engines.base import Engine, EngineSettings
    from quantbench.engines.server import Server

log = logging.getLogger(__name__)

OUTPUT_TOKENS = 32
_SENTENCE = (
    "The council met on Tuesday to discuss the budget proposal for the coming year, the "
    "repairs to the old bridge, the schedule of the public library and the new bus line."
)
PROMPT_SENTENCES = (0, 2, 5)
"""Prompt lengths alone, in sentences of about 35 tokens, beside a short question: from a
chat turn to a resent history, where TTFT is close to a line in the prompt tokens."""


REPEAT_SUFFIX = " Then one more."
TEMPLATE_TAIL = 8
"""Tokens at a chat prompt's end that a longer message does not share (the end of the user's
text, the message's close and the assistant's opening): a few; the cache block is read to
within them."""


def _prompt(sentences: int, nonce: int) -> str:
    """A prompt no earlier one shares beyond the chat template: each starts with its own
    number, so a prefix cache serves only the template, as it would for real traffic."""
    return " ".join([f"Note {nonce}.", *[_SENTENCE] * sentences, "Write one sentence about it."])


def probe_point(engine: Engine, settings: EngineSettings) -> tuple[str, EngineSettings]:
    """The setting of the pair's sweep whose batch limit is largest (None: no limit) and its
    label: the one whose batched steps the probe can see most of."""
    points = list(settings.sweep_points())

    def batch(item: tuple[str, EngineSettings]) -> float:
        limit = engine.max_batch(item[1])
        return float("inf") if limit is None else float(limit)

    return max(points, key=batch)


def _request(
    server: Server, engine: Engine, prompt: str, timeout_s: float, tokens: int = OUTPUT_TOKENS
) -> RequestRecord:
    rules = body_rules(
        model=server.spec.model_name,
        profile=engine.profile,
        fixed_output_length=True,
        request_fields={"temperature": 0},
    )
    body = turn_body(
        rules,
        api="chat",
        max_tokens=tokens,
        messages=[{"role": "user", "content": prompt}],
    )
    return server.stream(body, timeout_s)


def _measured(record: RequestRecord, concurrency: int) -> ProbeRequest:
    ttft, tpot = record.ttft, record.tpot
    if record.prompt_tokens is None or ttft is None or tpot is None:
        raise ProbeError(
            f"a probe request came back without the figures the fit needs (prompt tokens "
            f"{record.prompt_tokens}, output tokens {record.output_tokens}, TTFT {ttft}): the "
            "server must report usage in its stream"
        )
    return ProbeRequest(
        concurrency=concurrency,
        prompt_tokens=record.prompt_tokens,
        cached_tokens=record.cached_tokens or 0,
        output_tokens=record.output_tokens or 0,
        ttft_ms=ttft * 1e3,
        tpot_ms=tpot * 1e3,
    )


def probe_server(
    server: Server,
    engine: Engine,
    batch: int,
    repeats: int = 2,
    timeout_s: float = 300,
    tokens: int = OUTPUT_TOKENS,
) -> list[ProbeRequest]:
    """The probe's requests against a started, warmed-up server (see the module)."""
    out: list[ProbeRequest] = []
    nonce = 0
    for _ in range(repeats):
        for sentences in PROMPT_SENTENCES:
            nonce += 1
            record = _request(server, engine, _prompt(sentences, nonce), timeout_s, tokens)
            out.append(_measured(record, 1))
    # the longest prompt again with a line added: how much of a shared prefix the cache serves
    longest = out[-1]
    prompt = _prompt(PROMPT_SENTENCES[-1], nonce) + REPEAT_SUFFIX
    again = _request(server, engine, prompt, timeout_s, tokens)
    shared = max(1, longest.prompt_tokens - TEMPLATE_TAIL)
    out.append(_measured(again, 1).model_copy(update={"shared_prefix": shared}))
    for k in range(2, batch + 1):
        gate = threading.Barrier(k)

        def together(i: int, k: int = k, gate: threading.Barrier = gate) -> RequestRecord:
            gate.wait()
            return _request(server, engine, _prompt(0, 1000 * k + i), timeout_s, tokens)

        with ThreadPoolExecutor(k) as pool:
            records = list(pool.map(together, range(k)))
        out += [_measured(r, k) for r in records]
    return out


def probe_on(
    name: str,
    variant: str,
    engine: Engine,
    server: Server,
    label: str,
    point: EngineSettings,
    probe: ProbeSettings | None = None,
) -> PairCalibration:
    """Probe the pair's running, warmed-up server (the bench's own, at ``probe_point``'s
    setting ``label``) and fit its steps. A server that fails under the probe, or requests the
    fit cannot use, cost the pair its fit (``error``), not its bench: the estimate then predicts
    it from the roofline, and the bench records its own failure."""
    probe = probe or ProbeSettings()
    started = time.monotonic()
    limit = engine.max_batch(point)
    batch = min(probe.max_batch, limit) if limit is not None else probe.max_batch
    fit: StepFit | None = None
    error: str | None = None
    requests: list[ProbeRequest] = []
    try:
        requests = probe_server(server, engine, batch, probe.repeats, tokens=probe.output_tokens)
        fit = fit_steps(requests)
        log.info("%s (%s): %s", name, label, fit.describe())
    except (ServerError, ProbeError, ValueError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log.error("%s (%s): probe failed: %s", name, label, error)
    return _calibration(
        name, variant, engine, label, point, server.spec.redacted_argv(),
        time.monotonic() - started, requests=requests, fit=fit, error=error,
    )  # fmt: skip


def not_probed(
    name: str,
    variant: str,
    engine: Engine,
    label: str,
    point: EngineSettings,
    command: list[str],
    error: str | None = None,
    skipped: str | None = None,
) -> PairCalibration:
    """The record of a pair whose server was not probed: its server failed (``error``) or it
    was not asked (``skipped``, why); the estimate predicts it from the roofline alone."""
    return _calibration(
        name, variant, engine, label, point, command, 0.0, error=error, skipped=skipped
    )


def probed_gpu() -> Gpu | None:
    """The GPU the pair's server computes on: the stage's ``runtime.device`` as resolved
    (``QUANTBENCH_DEVICE``), else what auto resolves to here; None: the CPU."""
    import os

    return this_gpu(os.environ.get(DEVICE_ENV) or resolve_device("auto"))


def _calibration(
    name: str,
    variant: str,
    engine: Engine,
    label: str,
    point: EngineSettings,
    command: list[str],
    seconds: float,
    requests: list[ProbeRequest] | None = None,
    fit: StepFit | None = None,
    error: str | None = None,
    skipped: str | None = None,
) -> PairCalibration:
    gpu = probed_gpu()

    return PairCalibration(
        pair=name,
        variant=variant,
        engine=engine.name,
        server_point=label,
        settings=point.model_dump(mode="json"),
        command=command,
        cpu_model=machine.cpu_model(),
        gpu=gpu.name if gpu is not None else None,
        measured_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        seconds=seconds,
        requests=requests or [],
        fit=fit,
        error=error,
        skipped=skipped,
    )
