"""Estimate beside measurement: the roofline estimate at each measured closed-loop point.

The estimate stage runs before any benchmark, so its file usually holds estimates only, per
variant and hardware entry, at the concurrencies of ``estimate.workload``. Each measured
closed-loop point is put beside the estimate of its variant at the same concurrency (points at
concurrencies the estimate did not cover are listed as such). Where the estimate stage itself
compared measured points (``comparison.rows``), those rows are used as they are.

Where the estimate stage predicted the bench pairs (``pairs`` in its file: each pair, setting and
closed-loop workload at its own lengths, with the engine's batch limit), a measured row is put
beside its own prediction; otherwise beside the variant's estimate at the same concurrency.

Ratios read as in :mod:`quantbench.estimate.compare`: measured / estimated for TTFT and TPOT,
estimated / measured for throughput, so a ratio above 1 always means reality was slower. The
planning target (issue 18) is a band: |measured / estimated - 1| <= 25 % for TPOT at one stream
and for output tokens/s at every load; :func:`band_summary` says how many figures are in it and,
for each pair that misses, which part of the model is wrong.

The band is counted twice, because most figures repeat what calibrated the prediction: the
bench stage probed each pair's server at one setting, 1 to a few requests at once and short
prompts, just before its load points. A figure inside that (:class:`ProbeSpan`, read from
``reports/bench/<pair>/probe.json``) is in-sample and checks the fit; one beyond it (more
streams, another setting, other lengths) or of a pair without a probe is out-of-sample and checks
the model. Each row says which and why; the summary gives both counts and median errors, and says
so plainly when nothing was out of sample.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from quantbench.decision.profiles import JudgedRow, Profile
from quantbench.estimate.compare import ProbeSpan, SampleCheck
from quantbench.estimate.pipeline import slo_targets
from quantbench.outputs import PointKey, ReportInputs, read_output
from quantbench.schemas.estimate import VariantEstimate
from quantbench.schemas.machine import PairCalibration
from quantbench.schemas.roofline import ConcurrencyPoint

PREFERRED_HARDWARE = "this"
BAND = 0.25
"""The planning band: |measured / estimated - 1| <= 25 %."""


@dataclass
class EstimateRow:
    pair: str
    variant: str
    engine: str
    server_point: str
    load_point: str
    concurrency: int
    hardware: str
    estimate_engine: str
    estimated_ttft_ms: float | None
    measured_ttft_ms: float | None
    estimated_tpot_ms: float | None
    measured_tpot_ms: float | None
    estimated_output_tps: float | None
    measured_output_tps: float | None
    estimate_lengths: tuple[int | None, int | None]
    measured_lengths: tuple[float | None, float | None]
    source: str = "report"
    """'report' (matched here) or 'estimate stage' (its own comparison rows)."""
    hardware_label: str = ""
    """The hardware entry's own name (``hardware`` may be the path of a saved JSON)."""
    max_batch: int | None = None
    """Requests the engine runs at once with the row's setting, as the prediction assumed."""
    probe: ProbeSpan | None = None
    """What the pair's probe ran, where its prediction was fitted to one (None: no probe)."""

    @staticmethod
    def _ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b is not None and b > 0 else None

    @property
    def ttft_ratio(self) -> float | None:
        return self._ratio(self.measured_ttft_ms, self.estimated_ttft_ms)

    @property
    def tpot_ratio(self) -> float | None:
        return self._ratio(self.measured_tpot_ms, self.estimated_tpot_ms)

    @property
    def output_tps_ratio(self) -> float | None:
        return self._ratio(self.estimated_output_tps, self.measured_output_tps)

    @property
    def band_errors(self) -> dict[str, float]:
        """measured / estimated - 1 for the figures the planning band covers: TPOT at one
        stream, output tokens/s at every load."""
        out = {}
        if self.concurrency == 1 and self.tpot_ratio is not None:
            out["TPOT"] = self.tpot_ratio - 1
        if self.output_tps_ratio:
            out["output tok/s"] = 1 / self.output_tps_ratio - 1
        return out

    @property
    def within_band(self) -> bool | None:
        errors = self.band_errors
        return all(abs(e) <= BAND for e in errors.values()) if errors else None

    @property
    def lengths(self) -> tuple[float | None, float | None]:
        """Mean prompt (as served) and output tokens of the figure: as measured where the records
        tell, else as the prediction assumed."""
        measured, assumed = self.measured_lengths, self.estimate_lengths
        return (
            measured[0] if measured[0] is not None else assumed[0],
            measured[1] if measured[1] is not None else assumed[1],
        )

    @property
    def sample(self) -> SampleCheck:
        """In-sample (within what the pair's probe ran) or out-of-sample, and why."""
        if self.probe is None:
            if self.source == "pair prediction":
                return SampleCheck(False, "pair not probed (no probe fit): the roofline")
            return SampleCheck(False, "the variant's estimate: no pair probe fitted to it")
        return self.probe.judge(self.server_point, self.concurrency, *self.lengths)

    @property
    def within_2x(self) -> bool | None:
        ratios = [r for r in (self.ttft_ratio, self.tpot_ratio, self.output_tps_ratio) if r]
        return all(0.5 <= r <= 2.0 for r in ratios) if ratios else None


def preferred_hardware(estimates: list[VariantEstimate]) -> str | None:
    """The hardware entry to draw: ``this`` machine when estimated, else the first entry."""
    names = [e.hardware_name for e in estimates]
    if PREFERRED_HARDWARE in names:
        return PREFERRED_HARDWARE
    return names[0] if names else None


def probe_spans(inputs: ReportInputs, pairs: set[str], notes: list[str]) -> dict[str, ProbeSpan]:
    """What each of ``pairs``' probes ran, from its bench stage's ``probe.json`` below the inputs'
    root; a pair without a file, or whose probe failed, has none (its prediction is the
    roofline's); an unreadable file is a note."""
    spans = {}
    for pair in sorted(pairs):
        path = inputs.root / PairCalibration.OUTPUT.format(pair=pair)
        probed = read_output(path, PairCalibration, notes, pair=pair)
        if probed is None:
            continue
        span = ProbeSpan.from_probe(probed.server_point, probed.requests, probed.fit)
        if span is not None:
            spans[pair] = span
    return spans


def _measured_lengths(inputs: ReportInputs, key: PointKey) -> tuple[float | None, float | None]:
    repeats = inputs.records.get(key, [])
    done = [r for rep in repeats for r in rep.measured if r.status == "completed"]
    prompts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    outputs = [r.output_tokens for r in done if r.output_tokens is not None]
    return (
        sum(prompts) / len(prompts) if prompts else None,
        sum(outputs) / len(outputs) if outputs else None,
    )


def _beside(
    judged: JudgedRow,
    lengths: tuple[float | None, float | None],
    point: ConcurrencyPoint,
    **source: Any,
) -> EstimateRow:
    """A measured closed-loop row beside one estimated point (``source``: where it came from)."""
    row = judged.row
    return EstimateRow(
        pair=judged.pair,
        variant=judged.variant,
        engine=judged.engine,
        server_point=row.server_point,
        load_point=row.load_point,
        concurrency=int(row.load_value or 0),
        estimated_ttft_ms=point.ttft_ms,
        measured_ttft_ms=row.metric("ttft_p50_ms"),
        estimated_tpot_ms=point.itl_ms,
        measured_tpot_ms=row.metric("tpot_p50_ms"),
        estimated_output_tps=point.output_tps,
        measured_output_tps=row.metric("output_throughput"),
        measured_lengths=lengths,
        **source,
    )


def estimate_rows(inputs: ReportInputs, profile: Profile) -> tuple[list[EstimateRow], list[str]]:
    """Rows for every measured closed-loop point and hardware entry, and notes on gaps."""
    rows: list[EstimateRow] = []
    notes: list[str] = []
    by_variant: dict[str, list[VariantEstimate]] = {}
    for est in inputs.estimates:
        by_variant.setdefault(est.variant_name, []).append(est)
    stage_rows = [(est, row) for est in inputs.estimates for row in est.comparison_rows()]
    if stage_rows:
        for est, c in stage_rows:
            rows.append(
                EstimateRow(
                    pair=f"{c.variant}-{c.engine}",
                    variant=c.variant,
                    engine=c.engine,
                    server_point=c.setting or "default",
                    load_point=f"c{c.concurrency}",
                    concurrency=c.concurrency,
                    hardware=c.hardware,
                    estimate_engine=est.engine,
                    estimated_ttft_ms=c.estimated_ttft_ms,
                    measured_ttft_ms=c.measured_ttft_ms,
                    estimated_tpot_ms=c.estimated_tpot_ms,
                    measured_tpot_ms=c.measured_tpot_ms,
                    estimated_output_tps=c.estimated_output_tps,
                    measured_output_tps=c.measured_output_tps,
                    estimate_lengths=(est.workload.input_len, est.workload.output_len),
                    measured_lengths=(None, None),
                    source="estimate stage",
                    hardware_label=est.hardware.name or c.hardware,
                )
            )
        return rows, notes
    missing_variants: set[str] = set()
    predicted = {(p.pair, p.server_point, p.workload): p for p in inputs.predictions}
    probes = probe_spans(inputs, {p.pair for p in inputs.predictions}, notes)
    for judged in profile.rows:
        row = judged.row
        if not row.measured or row.load_kind != "concurrency" or row.load_value is None:
            continue
        concurrency = int(row.load_value)
        key = PointKey(judged.pair, row.server_point, row.workload, row.load_point)
        lengths = _measured_lengths(inputs, key)

        prediction = predicted.get((judged.pair, row.server_point, row.workload))
        own = prediction.at(concurrency) if prediction is not None else None
        if prediction is not None and own is not None:
            rows.append(
                _beside(
                    judged,
                    lengths,
                    own,
                    hardware=prediction.hardware_name,
                    estimate_engine=prediction.engine,
                    estimate_lengths=(prediction.input_len, prediction.output_len),
                    source="pair prediction",
                    hardware_label=prediction.hardware_name,
                    max_batch=prediction.max_batch,
                    probe=probes.get(judged.pair),
                )
            )
            continue
        ests = by_variant.get(judged.variant, [])
        if not ests:
            missing_variants.add(judged.variant)
            continue
        for est in ests:
            point = est.at(concurrency)
            if point is None:
                notes.append(
                    f"{judged.label}: the estimate for {judged.variant} on {est.hardware_name} has "
                    f"no concurrency {concurrency} (add it to estimate.workload.concurrency)"
                )
                continue
            rows.append(
                _beside(
                    judged,
                    lengths,
                    point,
                    hardware=est.hardware_name,
                    estimate_engine=est.engine,
                    estimate_lengths=(est.workload.input_len, est.workload.output_len),
                    hardware_label=est.hardware.name or est.hardware_name,
                )
            )
    for variant in sorted(missing_variants):
        notes.append(f"no estimate for variant {variant} in reports/estimate/estimates.json")
    return rows, notes


# Which part of the model a missed figure points at: (part, which figures, what they are).
_PARTS = (
    (
        "the decode step: bandwidth, per-step overhead",
        lambda row, name: name == "TPOT",
        "TPOT at one stream",
    ),
    (
        "a request alone: prefill, decode and per-request overhead",
        lambda row, name: name == "output tok/s" and row.concurrency == 1,
        "output tok/s at one stream",
    ),
    (
        "serving many: batched steps, the engine's batch limit, prompts mixed into steps",
        lambda row, name: name == "output tok/s" and row.concurrency > 1,
        "output tok/s above one stream",
    ),
)


_FIGURES = "TPOT at one stream, output tokens/s at every load; measured / estimated - 1"
_IN_SAMPLE = "in-sample: the setting, 1 to the largest batch and the lengths the pair's probe ran"

Figure = tuple[EstimateRow, str, float]
"""A planning figure: its row, which figure ('TPOT' or 'output tok/s'), measured / estimated - 1."""


def _tally(errors: Sequence[float]) -> tuple[str, str]:
    """'k of n' within the band, and the median |error|."""
    inside = sum(abs(err) <= BAND for err in errors)
    median = statistics.median(abs(err) for err in errors)
    return f"{inside} of {len(errors)}", f"median |error| {median:.0%}"


def _headline(inside: Sequence[float], outside: Sequence[float]) -> str:
    """Both counts and medians; where one kind is missing it says so rather than letting the
    other stand for validation."""
    band = f"planning figures within ±{BAND:.0%}"
    if inside and outside:
        (n_in, m_in), (n_out, m_out) = _tally(inside), _tally(outside)
        return (
            f"in-sample {n_in} {band} ({m_in}); out-of-sample {n_out} ({m_out}) "
            f"({_FIGURES}; {_IN_SAMPLE})"
        )
    if inside:
        n_in, m_in = _tally(inside)
        return (
            f"in-sample {n_in} {band} ({m_in}); no out-of-sample figure: every measured point is "
            "within the probe's own batches and lengths, so the band checks the probe's fit, "
            f"not a prediction ({_FIGURES})"
        )
    n_out, m_out = _tally(outside)
    return f"out-of-sample {n_out} {band} ({m_out}); no in-sample figure ({_FIGURES}; {_IN_SAMPLE})"


def _which(rows: Sequence[EstimateRow]) -> str:
    """'in-sample', 'out-of-sample', or how many of a mix were out of sample."""
    out = sum(not row.sample.in_sample for row in rows)
    if out in (0, len(rows)):
        return rows[0].sample.label
    return f"{out} of {len(rows)} out-of-sample"


def _misses(judged: Sequence[Figure]) -> list[str]:
    """For each pair and setting that misses the band, which part of the model is wrong, by how
    much at worst, and whether the misses were in or out of sample."""
    by_pair: dict[str, list[Figure]] = {}
    for item in judged:
        by_pair.setdefault(f"{item[0].pair} {item[0].server_point}", []).append(item)
    lines = []
    for label, items in sorted(by_pair.items()):
        misses = [(row, name, err) for row, name, err in items if abs(err) > BAND]
        parts = []
        for part, rows_of, what in _PARTS:
            mine = [(row, err) for row, name, err in misses if rows_of(row, name)]
            if not mine:
                continue
            worst = max((err for _, err in mine), key=abs)
            loads = f" ({len(mine)} loads)" if len(mine) > 1 else ""
            samples = _which([row for row, _ in mine])
            parts.append(f"{what} off by {worst:+.0%}{loads}, {samples} ({part})")
        if parts:
            lines.append(f"{label}: " + "; ".join(parts))
    return lines


def _row_lines(rows: Sequence[EstimateRow]) -> list[str]:
    """Each compared row: its figures' errors, in or out of sample, and why; out-of-sample
    first (those test the model)."""
    lines = []
    for row in sorted(
        rows, key=lambda r: (r.sample.in_sample, r.pair, r.server_point, r.concurrency)
    ):
        errors = ", ".join(f"{name} {err:+.0%}" for name, err in row.band_errors.items())
        check = row.sample
        lines.append(
            f"{row.pair} {row.server_point} c{row.concurrency}: {errors}, {check.label} "
            f"({check.reason})"
        )
    return lines


def band_summary(rows: Sequence[EstimateRow]) -> list[str]:
    """How many planning figures of this machine (the estimate for ``this`` beside what was
    measured on it) lie within the band, in-sample and out-of-sample apart (``EstimateRow.sample``);
    for each pair and setting that misses, which part of the model is wrong and by how much
    (``_PARTS``): the decode step (TPOT at one stream), a request alone (throughput at one
    stream: prefill and per-request overhead too), or serving many (throughput above one
    stream); then each row, in or out of sample and why."""
    here = [row for row in rows if row.hardware.lower() == PREFERRED_HARDWARE]  # measured here
    judged = [(row, name, err) for row in here for name, err in row.band_errors.items()]
    if not judged:
        return []
    inside = [err for row, _, err in judged if row.sample.in_sample]
    outside = [err for row, _, err in judged if not row.sample.in_sample]
    compared = [row for row in here if row.band_errors]
    return [_headline(inside, outside), *_misses(judged), *_row_lines(compared)]


@dataclass
class EdgeRow:
    """The SLO edge (the most streams that meet the workload's SLO) predicted and measured, for
    one pair, setting and workload."""

    pair: str
    server_point: str
    predicted: int | None
    """The largest concurrency (1-16) the prediction says meets the SLO's TTFT and per-token
    limits and fits in memory (None: not even one stream)."""
    measured: int | None
    """The largest measured concurrency whose row met the SLO and every check (None: none)."""
    measured_loads: list[int]
    limits: str

    @property
    def text(self) -> str:
        def show(x: int | None) -> str:
            return "none" if x is None else str(x)

        loads = ", ".join(map(str, self.measured_loads))
        measured = show(self.measured)
        if self.measured is not None and self.measured == max(self.measured_loads):
            measured = f"at least {measured}"  # the highest load measured passed
        return (
            f"{self.pair} {self.server_point}: predicted {show(self.predicted)}, measured "
            f"{measured} (of loads {loads}; {self.limits})"
        )


def edge_rows(inputs: ReportInputs, profile: Profile) -> list[EdgeRow]:
    """Predicted against measured SLO edge for each pair and setting the estimate predicted.

    The prediction holds means, the SLO percentiles: the estimate's TTFT and TPOT are compared
    with the SLO's tightest TTFT and per-token limits, whatever their percentile (said in
    ``limits``). The measured edge is the largest concurrency whose row is rankable; a grid
    that measured only a few loads bounds it only that finely (``measured_loads``)."""
    targets = slo_targets(profile.slo)
    limits = f"TTFT <= {targets.ttft_ms:g} ms, TPOT <= {targets.itl_ms:g} ms on the means"
    out = []
    for prediction in inputs.predictions:
        if prediction.workload != profile.workload:
            continue
        mine = [
            judged
            for judged in profile.rows
            if judged.pair == prediction.pair
            and judged.row.server_point == prediction.server_point
            and judged.row.measured
            and judged.row.load_kind == "concurrency"
            and judged.row.load_value is not None
        ]
        if not mine:
            continue
        meeting = [
            p.concurrency
            for p in prediction.points
            if p.ttft_ms <= targets.ttft_ms
            and (p.itl_ms is None or p.itl_ms <= targets.itl_ms)
            and p.fits_memory
        ]
        passing = [int(j.row.load_value) for j in mine if j.rankable]  # type: ignore[arg-type]
        out.append(
            EdgeRow(
                pair=prediction.pair,
                server_point=prediction.server_point,
                predicted=max(meeting) if meeting else None,
                measured=max(passing) if passing else None,
                measured_loads=sorted({int(j.row.load_value) for j in mine}),  # type: ignore[arg-type]
                limits=limits,
            )
        )
    return out
