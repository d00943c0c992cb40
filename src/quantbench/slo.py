"""Service-level objectives: parse constraint text, check requests and results against it.

Text is a list of constraints separated by ``;`` (or ``,``)::

    ttft:p95<=500ms; tpot:p50<200ms; e2e:p99<=60s; rps>=2; output_tps>=50; goodput>=1;
    error_rate<=0.01

A constraint is ``metric[:statistic] operator number[unit]``:

* latency metrics, one value per request: ``ttft``, ``tpot``, ``itl``, ``e2e``; units ``ms`` or
  ``s`` (required); statistic ``mean``, ``median``, ``min``, ``max``, ``pNN`` or ``pNN.N``.
  Without a statistic the constraint is about every request: a point is checked on its ``max``.
* aggregate metrics, one value per point: ``rps`` (completed requests/s, unit ``rps`` or
  ``req/s``), ``output_tps`` and ``total_tps`` (tokens/s, unit ``tok/s``), ``goodput``
  (requests/s meeting every per-request SLO, unit ``rps``), ``error_rate`` (a fraction, or ``%``).
* operators ``<``, ``<=``, ``>``, ``>=``, ``==``.

Latency constraints play two parts: each request is checked against its own value (that is what
goodput counts; for ``itl`` the statistic is taken over the request's own gaps), and a point is
checked against the statistic over all its requests. Aggregate constraints apply to a point only.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e")
AGGREGATE_METRICS = ("rps", "output_tps", "total_tps", "goodput", "error_rate")
METRICS = LATENCY_METRICS + AGGREGATE_METRICS

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}
NEGATION = {"<=": ">", "<": ">=", ">=": "<", ">": "<=", "==": "!="}

# unit -> factor to the metric's canonical unit (ms, requests/s, tokens/s, fraction)
_UNITS: dict[str, dict[str, float]] = {
    "latency": {"ms": 1.0, "s": 1000.0},
    "requests": {"": 1.0, "rps": 1.0, "req/s": 1.0},
    "tokens": {"": 1.0, "tok/s": 1.0},
    "fraction": {"": 1.0, "%": 0.01},
}
_KIND = {
    **{m: "latency" for m in LATENCY_METRICS},
    "rps": "requests",
    "goodput": "requests",
    "output_tps": "tokens",
    "total_tps": "tokens",
    "error_rate": "fraction",
}
_DISPLAY_UNIT = {"latency": "ms", "requests": "req/s", "tokens": "tok/s", "fraction": ""}
_STAT_RE = re.compile(r"p(\d{1,2}(?:\.\d+)?)")


class SLOParseError(ValueError):
    """Bad constraint text; ``str()`` shows the text with a caret under the bad part."""

    def __init__(self, text: str, start: int, end: int, problem: str, allowed: str) -> None:
        self.text, self.start, self.end = text, start, max(end, start + 1)
        self.problem, self.allowed = problem, allowed
        super().__init__(str(self))

    def __str__(self) -> str:
        line = self.text.replace("\n", " ")
        caret = " " * self.start + "^" * (self.end - self.start)
        return f"invalid SLO: {self.problem}\n  {line}\n  {caret}\n{self.allowed}"


class Constraint(BaseModel):
    """One parsed constraint; ``threshold`` is in the metric's canonical unit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    statistic: str | None
    op: str
    threshold: float
    unit: str
    text: str

    @property
    def per_request(self) -> bool:
        return self.metric in LATENCY_METRICS

    @property
    def percentile(self) -> float | None:
        m = _STAT_RE.fullmatch(self.statistic or "")
        return float(m.group(1)) if m else None

    def holds(self, value: float) -> bool:
        return OPERATORS[self.op](value, self.threshold)

    def describe(self) -> str:
        stat = f" {self.statistic}" if self.statistic else (" max" if self.per_request else "")
        return f"{self.metric}{stat}"


Verdict = Literal["pass", "fail", "undecided"]


class ConstraintResult(BaseModel):
    """One constraint checked on a point: its value, the interval around it where there is one,
    and a verdict that is "undecided" when the interval straddles the limit (or the sample is too
    small for the statistic: a p99 of 40 requests means nothing)."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    constraint: Constraint
    value: float | None
    low: float | None = None
    high: float | None = None
    verdict: Verdict = "fail"
    passed: bool
    reason: str


def _fmt(value: float, kind: str) -> str:
    unit = _DISPLAY_UNIT[kind]
    number = f"{value:.4g}" if kind == "fraction" else f"{value:,.4g}".replace(",", "")
    if kind == "latency" and abs(value) >= 100:
        number = f"{value:.0f}"
    return f"{number} {unit}".strip()


class _Scanner:
    def __init__(self, text: str, start: int, end: int) -> None:
        self.text, self.pos, self.end = text, start, end

    def skip_ws(self) -> None:
        while self.pos < self.end and self.text[self.pos].isspace():
            self.pos += 1

    def take(self, pattern: re.Pattern[str]) -> tuple[str, int, int] | None:
        self.skip_ws()
        m = pattern.match(self.text, self.pos, self.end)
        if not m:
            return None
        self.pos = m.end()
        return m.group(0), m.start(), m.end()


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_OP = re.compile(r"<=|>=|==|<|>|=|!=")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_UNIT = re.compile(r"[A-Za-z%/]+")


def _allowed_stats() -> str:
    return "allowed statistics: mean, median, min, max, pNN or pNN.N (e.g. p50, p99, p99.9)"


def _parse_one(text: str, start: int, end: int) -> Constraint:
    sc = _Scanner(text, start, end)
    got = sc.take(_NAME)
    if got is None:
        sc.skip_ws()
        raise SLOParseError(
            text,
            sc.pos,
            sc.pos + 1,
            "expected a metric name",
            f"allowed metrics: {', '.join(METRICS)}",
        )
    metric, m0, m1 = got
    if metric not in METRICS:
        raise SLOParseError(
            text, m0, m1, f"unknown metric {metric!r}", f"allowed metrics: {', '.join(METRICS)}"
        )
    kind = _KIND[metric]
    statistic = None
    sc.skip_ws()
    if sc.pos < end and text[sc.pos] == ":":
        sc.pos += 1
        got = sc.take(_NAME)
        if got is None:
            sc.skip_ws()
            raise SLOParseError(
                text, sc.pos, sc.pos + 1, "expected a statistic after ':'", _allowed_stats()
            )
        statistic, s0, s1 = got
        if metric not in LATENCY_METRICS:
            raise SLOParseError(
                text, s0 - 1, s1, f"{metric} is one number per point and takes no statistic",
                f"write it as '{metric}>=...' without ':{statistic}'",
            )  # fmt: skip
        pm = _STAT_RE.fullmatch(statistic)
        if statistic not in ("mean", "median", "min", "max") and not (
            pm and 0 < float(pm.group(1)) < 100
        ):
            raise SLOParseError(text, s0, s1, f"unknown statistic {statistic!r}", _allowed_stats())
    got = sc.take(_OP)
    ops = "allowed operators: < <= > >= =="
    if got is None or got[0] in ("=", "!="):
        sc.skip_ws()
        span = (got[1], got[2]) if got else (sc.pos, sc.pos + 1)
        found = f"{got[0]!r}" if got else repr(text[sc.pos : sc.pos + 1] or "end of text")
        raise SLOParseError(text, *span, f"expected a comparison operator, found {found}", ops)
    op = got[0]
    got = sc.take(_NUMBER)
    if got is None:
        sc.skip_ws()
        raise SLOParseError(
            text, sc.pos, sc.pos + 1, f"expected a number after {op!r}", "e.g. 500ms, 2, 0.01"
        )
    number = float(got[0])
    n0, n1 = got[1], got[2]
    unit = ""
    sc.skip_ws()
    u = _UNIT.match(text, sc.pos, end)
    u_start, u_end = sc.pos, sc.pos
    if u:
        unit, u_start, u_end = u.group(0), u.start(), u.end()
        sc.pos = u.end()
    units = _UNITS[kind]
    if unit not in units:
        allowed = ", ".join(x for x in units if x) + (" or none" if "" in units else "")
        problem = (
            f"{metric} needs a unit" if not unit else f"unit {unit!r} does not apply to {metric}"
        )
        raise SLOParseError(text, u_start if unit else n0, u_end if unit else n1, problem,
                            f"allowed units for {metric}: {allowed}")  # fmt: skip
    sc.skip_ws()
    if sc.pos < end:
        raise SLOParseError(
            text, sc.pos, end, f"unexpected text {text[sc.pos:end].strip()!r}",
            "separate constraints with ';'",
        )  # fmt: skip
    threshold = number * units[unit]
    if threshold < 0:
        raise SLOParseError(
            text, n0, n1, f"{metric} limit {got[0]} is negative",
            f"{metric} is never below 0: give a limit >= 0",
        )  # fmt: skip
    if kind == "fraction" and threshold > 1:
        raise SLOParseError(
            text, n0, u_end if unit else n1, f"{metric} limit {got[0]}{unit} is above 100 %",
            "write error_rate as a fraction (0.01) or a percentage (1%)",
        )  # fmt: skip
    return Constraint(
        metric=metric,
        statistic=statistic,
        op=op,
        threshold=threshold,
        unit=unit,
        text=text[start:end].strip(),
    )


def parse_slo(text: str) -> list[Constraint]:
    """Parse constraint text; raises :class:`SLOParseError` pointing at the bad part."""
    constraints: list[Constraint] = []
    pos = 0
    for m in re.finditer(r"[;,\n]|$", text):
        start, end = pos, m.start()
        pos = m.end()
        if text[start:end].strip():
            constraints.append(_parse_one(text, start, end))
        if m.group(0) == "":
            break
    if any(c.metric == "goodput" for c in constraints) and not per_request(constraints):
        i = text.find("goodput")
        raise SLOParseError(
            text, i, i + len("goodput"),
            "goodput counts requests that meet the per-request SLOs, and there are none",
            f"add at least one of {', '.join(LATENCY_METRICS)} (e.g. 'ttft<=500ms')",
        )  # fmt: skip
    return constraints


def slo_section(raw: Mapping[str, Any], key: str = "slo", origin: str = "params.yaml") -> str:
    """The SLO text of a params mapping, checked; ConfigError with the caret otherwise."""
    from quantbench.params import ConfigError

    text = raw.get(key) or ""
    if not isinstance(text, str):
        raise ConfigError(f"{origin}: {key}: expected text like 'ttft:p95<=500ms', got {text!r}")
    try:
        if text.strip():
            parse_slo(text)
    except SLOParseError as exc:
        raise ConfigError(f"{origin}: {key}: {exc}") from None
    return text


def per_request(constraints: Sequence[Constraint]) -> list[Constraint]:
    return [c for c in constraints if c.per_request]


class RequestLatencies(Protocol):
    """Per-request values in seconds (what :class:`~quantbench.load.records.RequestRecord` has)."""

    @property
    def ttft(self) -> float | None: ...
    @property
    def tpot(self) -> float | None: ...
    @property
    def e2e(self) -> float | None: ...
    @property
    def itls(self) -> list[float]: ...


def _within_request(values_ms: list[float], statistic: str | None) -> float | None:
    if not values_ms:
        return None
    if statistic in (None, "max"):
        return max(values_ms)
    if statistic == "min":
        return min(values_ms)
    if statistic == "mean":
        return sum(values_ms) / len(values_ms)
    p = 50.0 if statistic == "median" else float(statistic[1:])  # type: ignore[index]
    s = sorted(values_ms)
    rank = (len(s) - 1) * p / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def requests_needed(constraints: Sequence[Constraint], confidence: float) -> tuple[int, str]:
    """The fewest measured requests for which every constraint can be decided at
    ``confidence`` when the point meets it comfortably, and which constraint needs them.

    A latency percentile pNN needs :func:`quantbench.precision.min_samples` requests for its
    interval to exist at all (p90: 36, p95: 72, p99: 368 at 95 %); an upper limit L on the error
    rate needs n with (1 - L)^n <= alpha/2, so that even a point with no error at all shows an
    error rate below L (L = 0.05: 72; L = 0.1: 36).
    """
    import math

    from quantbench.precision import min_samples

    need, why = 1, ""
    alpha = 1 - confidence
    for c in constraints:
        n = 0
        if c.per_request and c.percentile is not None:
            n = min_samples(c.percentile / 100, confidence)
        elif c.metric == "error_rate" and c.op in ("<=", "<") and 0 < c.threshold < 1:
            n = math.ceil(math.log(alpha / 2) / math.log(1 - c.threshold) - 1e-12)
        if n > need:
            need, why = n, c.text
    return need, why


def fail_limits(constraints: Sequence[Constraint]) -> list[tuple[str, float, float]]:
    """(metric, percentile, upper limit in seconds) of each upper limit on a percentile of a
    per-request latency over requests (TTFT, TPOT, E2E): the limits a point can be seen to fail
    beyond noise before it is fully measured (the load runner stops such a point early)."""
    return [
        (c.metric, c.percentile, c.threshold / 1e3)
        for c in constraints
        if c.metric in ("ttft", "tpot", "e2e") and c.percentile is not None and c.op in ("<=", "<")
    ]


def request_meets(constraints: Sequence[Constraint], req: RequestLatencies) -> bool:
    """Whether one request meets every per-request constraint.

    A request without a TTFT or an end (it failed, or never got a token) meets none. TPOT and ITL
    are undefined for an answer of one token (one chunk): it counts as 0 for them, the convention
    of ``vllm bench serve``'s goodput.
    """
    for c in constraints:
        if c.metric == "itl":
            value = _within_request([g * 1000 for g in req.itls], c.statistic)
            value = 0.0 if value is None else value
        else:
            seconds = getattr(req, c.metric)
            if seconds is None:
                if c.metric != "tpot" or req.ttft is None:
                    return False
                value = 0.0
            else:
                value = seconds * 1000
        if not c.holds(value):
            return False
    return True


Lookup = Callable[
    [str, str | None], "float | tuple[float | None, float | None, float | None, str | None] | None"
]


def evaluate(constraints: Sequence[Constraint], lookup: Lookup) -> list[ConstraintResult]:
    """Check a point's values. ``lookup(metric, statistic)`` returns the value in canonical units,
    or ``(value, low, high, why_undecided)`` with its confidence interval (``why_undecided`` says
    why no verdict can be given, e.g. too few requests for a p99)."""
    results = []
    for c in constraints:
        kind = _KIND[c.metric]
        found = lookup(c.metric, c.statistic)
        value, low, high, why = found if isinstance(found, tuple) else (found, None, None, None)
        name = c.describe()
        want = f"{c.op} {_fmt(c.threshold, kind)}"
        if why is not None:
            results.append(
                ConstraintResult(
                    constraint=c,
                    value=value,
                    verdict="undecided",
                    passed=False,
                    reason=f"{name}: undecided, {why} ({want})",
                )
            )
            continue
        if value is None:
            results.append(
                ConstraintResult(
                    constraint=c, value=None, passed=False, reason=f"{name}: no value ({want})"
                )
            )
            continue
        shown = _fmt(value, kind)
        if low is not None and high is not None and math.isfinite(low) and math.isfinite(high):
            lo_ok, hi_ok = c.holds(low), c.holds(high)
            verdict: Verdict = (
                "pass" if lo_ok and hi_ok else "fail" if not (lo_ok or hi_ok) else ("undecided")
            )
            span = f" [{_fmt(low, kind)}, {_fmt(high, kind)}]"
        else:
            verdict = "pass" if c.holds(value) else "fail"
            span = ""
        relation = c.op if c.holds(value) else NEGATION[c.op]
        reason = f"{name} = {shown}{span} {relation} {_fmt(c.threshold, kind)}"
        if verdict == "undecided":
            reason = f"{name} = {shown}{span}: undecided, the interval straddles {want}"
        results.append(
            ConstraintResult(
                constraint=c,
                value=value,
                low=low,
                high=high,
                verdict=verdict,
                passed=verdict == "pass",
                reason=reason,
            )
        )
    return results


def overall(results: Sequence[ConstraintResult]) -> Verdict | None:
    """A point's verdict: fail if any constraint fails, undecided if any is, else pass."""
    if not results:
        return None
    verdicts = {r.verdict for r in results}
    if "fail" in verdicts:
        return "fail"
    return "undecided" if "undecided" in verdicts else "pass"
