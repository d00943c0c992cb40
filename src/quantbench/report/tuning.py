"""Tuned against default: per engine (pair) and workload, its best setting beside its defaults.

A pair that sweeps server settings has a default point (the settings of its params section, no
sweep value changed: ``ServerPoint.is_default``) and others. The gain is the ranked figure (good
output tokens per second under a per-request SLO, else output tokens per second) of the pair's best
ranked row over the best ranked row of its default point, at the same workload and SLO. Its
interval combines the two rows' intervals on the log scale (delta method: the two points are
measured independently), so a ratio whose interval holds 1 is no gain beyond noise.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from quantbench.report.inputs import ReportInputs
from quantbench.report.profiles import JudgedRow, Profile
from quantbench.schemas.bench import RaceDrop

Z95 = 1.959963984540054


@dataclass(frozen=True)
class TuningGain:
    pair: str
    workload: str
    metric: str
    tuned: JudgedRow
    default: JudgedRow | None
    ratio: float | None
    low: float | None
    high: float | None
    note: str
    held: str = ""
    """What the default point holds otherwise than the engine's own defaults ('' if nothing)."""
    raced: tuple[str, ...] = ()
    """Settings whose higher loads the race skipped, and why."""

    def text(self) -> str:
        tuned = f"{self.tuned.row.server_point} @ {self.tuned.row.load_point}"
        tail = "".join(f"; {r}" for r in self.raced)
        if self.default is None:
            return f"{self.pair}: {tuned}; {self.note}{tail}"
        default = f"{self.default.row.server_point} @ {self.default.row.load_point}"
        default += f" ({self.held})" if self.held else " (the engine's own defaults)"
        if self.ratio is None:
            return f"{self.pair}: {tuned} against {default}; {self.note}{tail}"
        span = f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None else ""
        return f"{self.pair}: {tuned} against {default}: {self.ratio:.2f}x{span}; {self.note}{tail}"


def held_text(engine: str, off: dict[str, object]) -> str:
    """The settings a default point holds otherwise than the engine's own defaults."""
    if not off:
        return ""
    held = ", ".join(f"{k}={_value(v)}" for k, v in off.items())
    return f"{engine}'s defaults but {held}"


def _value(v: object) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def _raced_text(label: str, drop: RaceDrop) -> str:
    return (
        f"{label} not run at {', '.join(drop.skipped)}: could deliver at most {drop.bound:.1f}, "
        f"below the leader's {drop.floor:.1f}"
    )


def ratio_interval(
    a: float, a_low: float, a_high: float, b: float, b_low: float, b_high: float
) -> tuple[float, float] | None:
    """95 % interval of a / b from the two figures' 95 % intervals (log scale, delta method)."""
    if min(a, b, a_low, b_low) <= 0:
        return None
    se_a = (math.log(a_high) - math.log(a_low)) / (2 * Z95)
    se_b = (math.log(b_high) - math.log(b_low)) / (2 * Z95)
    half = Z95 * math.hypot(se_a, se_b)
    ratio = a / b
    return ratio * math.exp(-half), ratio * math.exp(half)


def _best(rows: list[JudgedRow], metric: str) -> JudgedRow | None:
    ranked = [r for r in rows if r.rankable and r.row.metric(metric) is not None]
    return max(ranked, key=lambda r: r.row.metric(metric) or 0.0, default=None)


def _gain(
    pair: str,
    workload: str,
    metric: str,
    tuned: JudgedRow,
    default: JudgedRow | None,
    note: str,
    span: tuple[float, float] | None = None,
    *,
    held: str = "",
    raced: tuple[str, ...] = (),
) -> TuningGain:
    ratio = None
    if default is not None:
        a, b = tuned.row.metric(metric), default.row.metric(metric)
        ratio = a / b if a is not None and b else None
    low, high = span if span is not None else (None, None)
    return TuningGain(pair, workload, metric, tuned, default, ratio, low, high, note, held, raced)


def tuning_gains(inputs: ReportInputs, profile: Profile) -> list[TuningGain]:
    """One gain per pair that swept more than one server setting, under ``profile``."""
    metric = profile.ranked_by
    gains: list[TuningGain] = []
    for pair, summary in inputs.pairs.items():
        if len(summary.servers) < 2:
            continue
        defaults = {s.server_point: s for s in summary.servers if s.is_default}
        mine = [r for r in profile.rows if r.pair == pair]
        tuned = _best(mine, metric)
        if tuned is None:
            continue
        raced = tuple(
            _raced_text(s.server_point, s.raced[profile.workload])
            for s in summary.servers
            if profile.workload in s.raced and s.server_point not in defaults
        )
        gain = functools.partial(_gain, pair, profile.workload, metric, tuned, raced=raced)

        if not defaults:
            gains.append(
                gain(
                    None, "its sweep ran no point at the default settings (every point changed one)"
                )
            )
            continue
        default = _best([r for r in mine if r.row.server_point in defaults], metric)
        if default is None:
            gains.append(gain(None, "no default-setting row met the SLO and every check"))
            continue
        server = defaults[default.row.server_point]
        gain = functools.partial(gain, held=held_text(summary.engine, server.off_engine_defaults))
        a, b = tuned.row.metric(metric), default.row.metric(metric)
        if not a or not b:
            gains.append(gain(default, "the default delivers nothing to compare"))
            continue
        ia, ib = tuned.row.intervals.get(metric), default.row.intervals.get(metric)
        span = (
            ratio_interval(a, ia.low, ia.high, b, ib.low, ib.high)
            if ia is not None and ib is not None
            else None
        )
        # loads of the default the race skipped could have delivered up to the race's bound:
        # the ratio's low end allows for a default that high
        drop = server.raced.get(profile.workload)
        widened = drop is not None and drop.metric == metric and span is not None and ia is not None
        if widened and drop.bound > 0:
            span = (min(span[0], ia.low / drop.bound), span[1])
        if tuned.row.server_point in defaults:
            note = "the default setting is the best one"
        elif span is None:
            note = "no interval on one of the two figures"
        elif span[0] > 1:
            note = "a gain beyond noise"
        else:
            note = "not separable from the default beyond noise"
        if drop is not None:
            counted = ", counted in the interval" if widened else ""
            note += (
                f" (the default's {', '.join(drop.skipped)} not run: at most "
                f"{drop.bound:.1f}{counted})"
            )
        gains.append(gain(default, note, span))
    return gains
