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

A point's verdict on a percentile or on the error rate is a one-sided question, answered with
one-sided bounds at the confidence (:func:`evaluate`): pass when the bound on the passing side is
within the limit, fail when the bound on the other side is beyond it, otherwise undecided. How
often such a verdict can pass depends on the sample, so every verdict states its power against
one design alternative, and :func:`requests_needed` sizes a point from it: a configuration
with a quarter of the allowance beyond the limit (an upper limit on pNN sitting at the true
p(100 - (100 - NN)/4), p90 -> p97.5; an error rate a quarter of its limit) should pass with
probability ``power``.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

from quantbench.precision import pass_count, power_to_pass, sample_for_power

if TYPE_CHECKING:
    from quantbench.precision import Bounds

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
# The power a point is sized for when the workload does not say (workloads.spec.PrecisionSpec.power).
DEFAULT_POWER = 0.8
# The design alternative a verdict's power is stated against: this share of the allowance (the
# requests a percentile limit lets beyond it, or the errors an error-rate limit allows) beyond
# the limit.
DESIGN_SHARE = 0.25
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
    and a verdict that is "undecided" when the evidence does not settle it at the confidence. A
    percentile or error-rate verdict is decided on one-sided bounds (``lower_bound``,
    ``upper_bound``) and states its ``power`` at its own sample."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    constraint: Constraint
    value: float | None
    low: float | None = None
    high: float | None = None
    verdict: Verdict = "fail"
    passed: bool
    reason: str
    lower_bound: float | None = Field(
        None,
        description="The one-sided lower bound at the confidence that the verdict was decided on "
        "(None: no such bound at this sample, or a verdict on the value or on a two-sided "
        "interval).",
    )
    upper_bound: float | None = Field(None, description="The one-sided upper bound, likewise.")
    n: int | None = Field(None, description="The sample the bounds are over.")
    power: float | None = Field(
        None,
        description="The probability that a sample of n passes were a quarter of the allowance "
        "beyond the limit (0: no outcome of n could pass, 'too few requests'); None where the "
        "verdict is not a count (rates, means, the maximum).",
    )


@dataclass(frozen=True)
class Measured:
    """What a :data:`Lookup` gives for one constraint: the point's value, the two-sided interval
    shown beside it, why no verdict can be given without bounds (e.g. too few requests for an
    interval), and the one-sided bounds a percentile or error-rate verdict is decided on."""

    value: float | None
    low: float | None = None
    high: float | None = None
    why: str | None = None
    bounds: Bounds | None = None


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


class Slo(str):
    """An SLO: its text as written, and its constraints, parsed once when it is made.

    An ``Slo`` is a ``str`` (its text): it prints, compares, hashes and serialises as the text,
    so every file that records an SLO keeps recording the text. Its :attr:`constraints` are the
    text parsed by :func:`parse_slo`, here and nowhere else: params.yaml's ``slo:``, a workload's
    own ``slo:``, a profile's, or the text a stage output recorded all become constraints by
    becoming an ``Slo``. ``Slo("")`` (or blank text) has none. As a pydantic field's type it takes
    text (refused with the caret under the bad part) and is dumped as text.
    """

    _constraints: tuple[Constraint, ...]

    def __new__(cls, text: str = "") -> Slo:
        if isinstance(text, Slo):
            return text
        if not isinstance(text, str):
            raise TypeError(f"an SLO is text like 'ttft:p95<=500ms', got {text!r}")
        made = super().__new__(cls, text)
        made._constraints = tuple(parse_slo(text)) if text.strip() else ()
        return made

    @property
    def text(self) -> str:
        """The text as written (a plain ``str``)."""
        return str.__str__(self)

    @property
    def constraints(self) -> tuple[Constraint, ...]:
        return self._constraints

    @property
    def per_request(self) -> list[Constraint]:
        """The constraints every request is checked against (what goodput counts)."""
        return per_request(self._constraints)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        def made(value: Any, text: core_schema.ValidatorFunctionWrapHandler) -> Slo:
            return value if isinstance(value, Slo) else cls(text(value))  # parsed once

        return core_schema.no_info_wrap_validator_function(
            made,
            core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(str.__str__),
        )


NO_SLO = Slo("")
"""No constraints."""

DEFAULT_PROFILE = "default"
"""The SLO profile a workload is judged by unless named otherwise: its own ``slo:`` (else
params.yaml's); ``report.profiles`` names the others."""


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


def pass_share(c: Constraint) -> float | None:
    """The share of a point's sample that must meet the limit for ``c`` to hold, where its
    verdict is a count: q for an upper limit on the q-quantile (1 - q for a lower one), 1 - L
    for an upper limit L on the error rate (the answered share; L for a lower limit). None for
    the rest: rates, means, the maximum, '=='."""
    if c.op == "==":
        return None
    upper = c.op in ("<=", "<")
    if c.per_request and c.percentile is not None:
        q = c.percentile / 100
        return q if upper else 1 - q
    if c.metric == "error_rate":
        return 1 - c.threshold if upper else c.threshold
    return None


def design_within(share: float) -> float:
    """The share meeting the limit at the design alternative: all but a quarter of the
    allowance (p90 -> 0.975; error_rate<=0.1 -> 0.975 answered)."""
    return 1 - DESIGN_SHARE * (1 - share)


def requests_needed(
    constraints: Sequence[Constraint], confidence: float, power: float = DEFAULT_POWER
) -> tuple[int, str]:
    """The fewest measured requests for which each constraint passes with probability at least
    ``power`` at its design alternative (a quarter of the allowance beyond the limit), judged
    one-sided at ``confidence``, and which constraint needs them.

    Exact binomial sums (:func:`quantbench.precision.sample_for_power`); at 95 % and power 0.8:
    p50 11, p90 61 (pass with 59 of 61 under the limit), p95 153, p99 773; error_rate<=0.1 61
    (pass with at most 2 errors). The power is not monotone in n: more requests than this can
    have less until the pass count moves up (p90: 71-79 % at 62-75, at least 80 % from 76 on).
    """

    need, why = 1, ""
    for c in constraints:
        share = pass_share(c)
        if share is None:
            continue
        n = sample_for_power(share, confidence, design_within(share), power) or 0
        if n > need:
            need, why = n, c.text
    return need, why


# The metrics whose percentile limits the load runner can judge as the requests come in (its
# ``values``: TTFT and E2E with every unanswered request as infinitely late, TPOT over answers)
EARLY_PASS_METRICS = ("ttft", "tpot", "e2e")
# The looks of the early-pass design: a first at the fewest requests that can show every limit
# met, a last at the cap (the verdict's error rate split between them)
EARLY_PASS_LOOKS = 2


@dataclass(frozen=True)
class EarlyPass:
    """A point's SLO verdict in two looks (a group-sequential design with the error rate split
    equally, Bonferroni): the verdict is judged one-sided at ``confidence`` = 1 - (1 - the
    bench's confidence) / 2 wherever it is taken, so a point that stops at its first look on a
    pass and one measured to its cap each claim a pass wrongly at most half as often as the
    bench's confidence allows, and the two together at most as often. The first look is the
    fewest requests at which every constraint could pass at that level (p90 and
    error_rate<=0.1: 36, every one of them within the limit); the last is the point's cap,
    sized for the power at that level (p90: 85 requests where one look needs 61)."""

    confidence: float
    first_look: int
    limits: list[tuple[str, float, float]]
    """(metric, percentile, upper limit in seconds) of each per-request latency limit."""
    error_limit: float | None
    """The error-rate limit (a fraction), if the SLO has one."""


def fewest_to_pass(share: float, confidence: float) -> int:
    """The fewest values with which a limit a ``share`` of them must meet can pass at
    ``confidence`` (every one of them within it: share^n <= 1 - confidence)."""

    n = max(1, math.ceil(math.log(1 - confidence) / math.log(share)) - 1)
    while pass_count(n, share, confidence) is None:
        n += 1
    return n


def early_pass(
    constraints: Sequence[Constraint], confidence: float, looks: int = EARLY_PASS_LOOKS
) -> EarlyPass | None:
    """The two-look design of :class:`EarlyPass` for these constraints at the bench's
    ``confidence``; None where some constraint is not one the load runner can judge as requests
    come in (a rate, a mean, a lower limit, an ITL or a maximum): such a point is measured in
    one look."""
    look_confidence = 1 - (1 - confidence) / looks
    limits: list[tuple[str, float, float]] = []
    error_limit: float | None = None
    first = 1
    for c in constraints:
        share = pass_share(c)
        if share is None or c.op not in ("<=", "<"):
            return None
        if c.metric in EARLY_PASS_METRICS and c.per_request and c.percentile is not None:
            limits.append((c.metric, c.percentile, c.threshold / 1e3))
        elif c.metric == "error_rate":
            error_limit = c.threshold if error_limit is None else min(error_limit, c.threshold)
        else:
            return None
        first = max(first, fewest_to_pass(share, look_confidence))
    if not limits and error_limit is None:
        return None
    return EarlyPass(look_confidence, first, limits, error_limit)


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
    [str, str | None],
    "float | Measured | tuple[float | None, float | None, float | None, str | None] | None",
]


def _measured(found: float | Measured | tuple[Any, ...] | None) -> Measured:
    if isinstance(found, Measured):
        return found
    if isinstance(found, tuple):
        return Measured(*found)
    return Measured(found)


def _two_sided(c: Constraint, low: float, high: float) -> Verdict:
    """pass/fail when the whole interval lies on one side of the limit. An infinite end is a
    value like any other: an upper end of +inf (a request never answered) never passes."""
    lo_ok, hi_ok = c.holds(low), c.holds(high)
    return "pass" if lo_ok and hi_ok else "fail" if not (lo_ok or hi_ok) else "undecided"


def _one_sided(c: Constraint, bounds: Bounds) -> Verdict:
    """pass when the bound on the passing side is within the limit, fail when the bound on the
    other side is beyond it (for an upper limit: the upper and the lower bound)."""
    upper = c.op in ("<=", "<")
    for_pass, for_fail = (bounds.upper, bounds.lower) if upper else (bounds.lower, bounds.upper)
    if for_pass is not None and c.holds(for_pass):
        return "pass"
    if for_fail is not None and not c.holds(for_fail):
        return "fail"
    return "undecided"


def _bound_text(bound: float | None, side: str, bounds: Bounds, kind: str) -> str:
    level = f"{bounds.confidence * 100:.4g} %"
    if bound is None:
        return f"no one-sided {level} {side} bound from {bounds.n}"
    return f"its one-sided {level} {side} bound {_fmt(bound, kind)}"


def _design_text(c: Constraint) -> str:
    if c.metric == "error_rate" and c.op in ("<=", "<"):
        return f"the error rate a quarter of the limit ({_fmt(c.threshold / 4, 'fraction')})"
    if c.per_request:
        return (
            f"a quarter of the allowed tail {'above' if c.op in ('<=', '<') else 'below'} the limit"
        )
    return "a quarter of the allowance beyond the limit"


def _power_text(c: Constraint, share: float, bounds: Bounds, power: float) -> str:
    """The verdict's power at its own n, or that no outcome of n could pass and what would."""

    if power > 0:
        # rounded down: never more power than there is
        return f"power {math.floor(power * 100)} % at n={bounds.n} to pass were {_design_text(c)}"
    need = sample_for_power(share, bounds.confidence, design_within(share), DEFAULT_POWER)
    what = c.statistic or c.metric
    more = f": {need} give power {DEFAULT_POWER * 100:.0f} %" if need else ""
    return f"too few requests for {what} ({bounds.n}) to pass whatever they show{more}"


def _judge_counted(
    c: Constraint, found: Measured, bounds: Bounds, share: float, head: str
) -> ConstraintResult:
    """A percentile or error-rate constraint judged on its one-sided bounds, with its power."""

    kind = _KIND[c.metric]
    verdict = _one_sided(c, bounds)
    upper = c.op in ("<=", "<")
    limit = _fmt(c.threshold, kind)
    assert found.value is not None
    relation = c.op if c.holds(found.value) else NEGATION[c.op]
    if verdict == "pass":
        bound = bounds.upper if upper else bounds.lower
        side = "upper" if upper else "lower"
        said = f" {relation} {limit}: pass, {_bound_text(bound, side, bounds, kind)} {c.op} {limit}"
    elif verdict == "fail":
        bound = bounds.lower if upper else bounds.upper
        side = "lower" if upper else "upper"
        said = f" {relation} {limit}: fail, {_bound_text(bound, side, bounds, kind)} "
        said += f"{NEGATION[c.op]} {limit}"
    else:
        ends = ", ".join(
            "none" if b is None else _fmt(b, kind) for b in (bounds.lower, bounds.upper)
        )
        said = (
            f": undecided, its one-sided {bounds.confidence * 100:.4g} % lower and upper bounds "
            f"[{ends}] straddle {c.op} {limit}"
        )
    power = power_to_pass(bounds.n, share, bounds.confidence, design_within(share))
    return ConstraintResult(
        constraint=c, value=found.value, low=found.low, high=found.high, verdict=verdict,
        passed=verdict == "pass", reason=f"{head}{said}; {_power_text(c, share, bounds, power)}",
        lower_bound=bounds.lower, upper_bound=bounds.upper, n=bounds.n, power=power,
    )  # fmt: skip


def evaluate(constraints: Sequence[Constraint], lookup: Lookup) -> list[ConstraintResult]:
    """Check a point's values. ``lookup(metric, statistic)`` returns the value in canonical units,
    or a :class:`Measured` with its interval and one-sided bounds (or the older tuple ``(value,
    low, high, why_undecided)``, where ``why_undecided`` says why no verdict can be given, e.g.
    too few requests for a p99).

    A percentile or error-rate constraint with bounds is judged on them (see the module
    docstring); anything else on its two-sided interval where there is one, else on its value.
    """
    results = []
    for c in constraints:
        kind = _KIND[c.metric]
        found = _measured(lookup(c.metric, c.statistic))
        value, low, high = found.value, found.low, found.high
        name = c.describe()
        want = f"{c.op} {_fmt(c.threshold, kind)}"
        share = pass_share(c)
        counted = found.bounds is not None and share is not None and value is not None
        if found.why is not None and not counted:
            results.append(
                ConstraintResult(
                    constraint=c,
                    value=value,
                    verdict="undecided",
                    passed=False,
                    reason=f"{name}: undecided, {found.why} ({want})",
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
        span = (
            f" [{_fmt(low, kind)}, {_fmt(high, kind)}]"
            if low is not None and high is not None
            else ""
        )
        if counted:
            assert found.bounds is not None and share is not None
            results.append(_judge_counted(c, found, found.bounds, share, f"{name} = {shown}{span}"))
            continue
        if low is not None and high is not None:
            verdict = _two_sided(c, low, high)
        else:
            verdict = "pass" if c.holds(value) else "fail"
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
