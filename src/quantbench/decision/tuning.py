"""Tuned against default: per engine (pair) and workload, its best setting beside its defaults.

A pair that sweeps server settings has a default point (the settings of its params section, no
sweep value changed: ``ServerPoint.is_default``) and others. The gain is the ranked figure (good
output tokens per second under a per-request SLO, else output tokens per second) of the pair's best
ranked row over the best ranked row of its default point, at the same workload and SLO. Its
interval combines the two rows' intervals on the log scale (delta method: the two points are
measured independently), so a ratio whose interval holds 1 is no gain beyond noise.

That ratio comes from the very measurements that chose the tuned setting, so it favours whichever
setting was lucky (a winner's curse: with 8 identical settings the best shows a "gain beyond
noise" 10 % of the time). A gain is therefore reported from the decide stage's confirming
measurement where there is one (the tuned and the default row measured again, in alternation,
apart from the selection); where there is none the text says the gain is the selection's own.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from quantbench.decision.compare import figure_ratio
from quantbench.decision.profiles import JudgedRow, Profile
from quantbench.decision.rules import DecisionSettings
from quantbench.outputs import ReportInputs
from quantbench.precision import Figure
from quantbench.schemas.bench import RaceDrop
from quantbench.schemas.decide import Duel


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
    confirmed: str = ""
    """The confirming measurement the ratio comes from ('' where it is the selection's own)."""

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
        source = f" ({self.confirmed})" if self.confirmed else ""
        return (
            f"{self.pair}: {tuned} against {default}: {self.ratio:.2f}x{span}{source}; "
            f"{self.note}{tail}"
        )


def held_text(engine: str, off: dict[str, object]) -> str:
    """The settings a default point holds otherwise than the engine's own defaults."""
    if not off:
        return ""
    held = ", ".join(f"{k}={_value(v)}" for k, v in off.items())
    return f"{engine}'s defaults but {held}"


def _value(v: object) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def _raced_text(label: str, drop: RaceDrop) -> str:
    left = [
        f"{how} at {', '.join(points)}"
        for how, points in (("not run", drop.skipped), ("stopped", drop.stopped))
        if points
    ]
    return (
        f"{label} {' and '.join(left)}: could deliver at most {drop.bound:.1f}, "
        f"below {drop.floor:.1f}, the leader's low end less the decision's margins"
    )


def _span(
    ia: Figure | None, ib: Figure | None, a: float, b: float, profile: Profile, settings_n: int
) -> tuple[float, float] | None:
    """The interval on tuned / default from the two rows' own intervals, with the drift
    between two measurements taken at different times added (quantbench.decision.compare).

    The tuned row is the best of ``settings_n`` settings, chosen on these very measurements: a
    gain read off them is the largest of ``settings_n - 1`` comparisons with the default, so
    each is read at the confidence that keeps the family's (Bonferroni): with 8 identical
    settings and 2 % drift, the old interval claimed a gain beyond noise in 52 % of runs."""
    if ia is None or ib is None:
        return None
    settings = profile.how.settings if profile.how is not None else DecisionSettings()
    return gain_interval(
        ia.model_copy(update={"value": a}), ib.model_copy(update={"value": b}), settings,
        settings_n,
    )  # fmt: skip


def gain_interval(
    tuned: Figure, default: Figure, settings: DecisionSettings, settings_n: int
) -> tuple[float, float] | None:
    """tuned / default, drift added, at the family confidence over ``settings_n - 1``
    comparisons (see :func:`_span`); None where a figure is not positive."""
    contrast = figure_ratio(tuned, default, settings.drift)
    if contrast is None:
        return None
    family = 1 - (1 - settings.confidence) / max(1, settings_n - 1)
    return contrast.interval(family)


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
    confirmed: str = "",
) -> TuningGain:
    ratio = None
    if default is not None:
        a, b = tuned.row.metric(metric), default.row.metric(metric)
        ratio = a / b if a is not None and b else None
    low, high = span if span is not None else (None, None)
    return TuningGain(
        pair, workload, metric, tuned, default, ratio, low, high, note, held, raced, confirmed
    )


def _confirming(inputs: ReportInputs, workload: str, tuned: str, default: str) -> Duel | None:
    """The decide stage's rounds on these two rows, as tuned against default: its
    tuned-vs-default duel, else a contender duel between the same two rows, either way round
    (a default setting not separable from its pair's tuned leader is measured against it: the
    same comparison, apart from the selection; the report must not read it two ways)."""
    if inputs.confirm is None:
        return None
    duels = sorted(
        inputs.confirm.for_workload(workload), key=lambda d: d.purpose != "tuned-vs-default"
    )
    for d in duels:
        if (d.a, d.b) == (tuned, default):
            return d
        if (d.a, d.b) == (default, tuned):
            return _turned(d)
    return None


def _turned(duel: Duel) -> Duel:
    """The duel read the other way round: b against a (the ratio and its interval inverted)."""
    c = duel.contrast
    if c is not None:
        c = c.model_copy(
            update={
                "log_ratio": -c.log_ratio,
                "ratio": 1 / c.ratio if c.ratio > 0 else math.inf,
                "low": 1 / c.high if c.high > 0 else math.inf,
                "high": 1 / c.low if c.low > 0 else math.inf,
            }
        )
    return duel.model_copy(update={"a": duel.b, "b": duel.a, "contrast": c})


def tuning_gains(
    inputs: ReportInputs, profile: Profile, confirmed: bool = True
) -> list[TuningGain]:
    """One gain per pair that swept more than one server setting, under ``profile``;
    ``confirmed``: take the ratio from the decide stage's confirming rounds where it ran (the
    default profile only: the rounds measured the workload's own SLO)."""
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
        span = _span(ia, ib, a, b, profile, len(summary.servers))
        # loads of the default the race skipped could have delivered up to the race's bound:
        # the ratio's low end allows for a default that high
        drop = server.raced.get(profile.workload)
        widened = drop is not None and drop.metric == metric and span is not None and ia is not None
        if widened and drop.bound > 0:
            span = (min(span[0], ia.low / drop.bound), span[1])
        duel = (
            _confirming(inputs, profile.workload, tuned.key, default.key)
            if confirmed and profile.is_default
            else None
        )
        source = ""
        if duel is not None and duel.contrast is not None:
            c = duel.contrast
            gain = functools.partial(gain, confirmed=f"confirmed apart from the selection: {c.how}")
            a, b = c.ratio, 1.0
            span = (c.low, c.high)
            source = "confirmed"
        elif duel is not None:
            source = f"not confirmed: {duel.stopped}"
        if tuned.row.server_point in defaults:
            note = "the default setting is the best one"
        elif span is None:
            note = "no interval on one of the two figures"
        elif span[0] > 1:
            note = "a gain beyond noise"
        else:
            note = "not separable from the default beyond noise"
        if source.startswith("not confirmed") or (
            not source and tuned.row.server_point not in defaults and confirmed
        ):
            note += (
                " (from the measurements that chose it: "
                + (source or "no confirming measurement")
                + ")"
            )
        if drop is not None:
            counted = ", counted in the interval" if widened else ""
            left = " and ".join(
                f"{', '.join(points)} {how}"
                for how, points in (("not run", drop.skipped), ("stopped", drop.stopped))
                if points
            )
            note += f" (the default's {left}: at most {drop.bound:.1f}{counted})"
        got = gain(default, note, span)
        if source == "confirmed":
            got = replace(got, ratio=a / b)
        gains.append(got)
    return gains
