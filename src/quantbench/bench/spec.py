"""params.yaml `bench:`: how the benchmark stages run (pairs, grid or search, repeats, price)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from quantbench.ports import host_problem, is_loopback
from quantbench.settings import Label, Settings

PAIR_NAME = re.compile(r"^[A-Za-z0-9_.]+(?:-[A-Za-z0-9_.]+)*$")


class Pair(Settings):
    """One benchmark stage: a variant on an engine."""

    variant: str = Field(description="A variant name from `variants:`.")
    engine: str = Field(
        description="A registered engine (`quantbench pairs` lists the valid pairs): a built-in "
        "one (quantbench.engines.registry.BUILTIN) or a plugin's."
    )
    settings: dict[str, Any] = Field(
        {},
        description="This pair's own engine settings, laid over `engines.<engine>` (its sweep "
        "included), e.g. {parallel: 4, sweep: {}} to run one llama.cpp pair at 4 slots only.",
    )
    probe: bool = Field(
        True,
        description="Probe this pair's server for the estimate: a few requests on the bench's own "
        "server, before its points (reports/bench/<pair>/probe.json). false: the estimate "
        "predicts the pair from the roofline and the machine's calibration alone, and the report "
        "says it was not probed.",
    )
    fallback_for: str | None = Field(
        None,
        description="Another pair of the same variant that this one stands in for: it runs "
        "only where that pair's engine cannot serve the variant on this machine (e.g. "
        "gptq-w4g64-vllm on a CPU whose vLLM build has no 4-bit kernel), and otherwise starts "
        "no server and says why. The pair it stands in for is then recorded as not served "
        "here instead of refusing the run (quantbench.bench.served_here).",
    )


class SearchSettings(Settings):
    """SLO-edge search: the highest load that still meets every SLO, by growing then bisecting,
    read through an isotonic fit of the pass rates and confirmed around the edge."""

    kind: Literal["concurrency", "rate"] = Field(
        "concurrency", description="Search over closed-loop streams or open-loop request rates."
    )
    start: float = Field(1, gt=0, description="First load tried.")
    max: float = Field(64, gt=0, description="Highest load tried.")
    precision: float = Field(
        0.1,
        gt=0,
        lt=1,
        description="Rate search stops when the bracket is this narrow relative to its top "
        "(concurrency search stops at adjacent integers).",
    )
    num_requests: int | None = Field(
        None,
        gt=0,
        description="Measured requests per tried point; default: the workload's own size (its "
        "precision target, or its num_requests). A concurrency search needs at least `max`.",
    )
    confirm: int = Field(
        1,
        ge=0,
        description="Extra runs of each of the two loads around the edge once the bracket is "
        "closed: a fail that was noise is outvoted and the search goes on upward, a lucky pass "
        "is outvoted and it bisects below (0: one run per load, plain grow-then-bisect).",
    )
    max_runs: int | None = Field(
        None, gt=0, description="Stop after this many runs whatever the state (None: no cap)."
    )

    @model_validator(mode="after")
    def _start_below_max(self) -> SearchSettings:
        if self.kind == "concurrency":
            for name in ("start", "max"):
                value = getattr(self, name)
                if value < 1 or value != int(value):
                    raise ValueError(
                        f"search.{name} is {value:g}, but a concurrency search counts streams: "
                        f"give a whole number >= 1 (e.g. {max(1, round(value))}), or set "
                        "search.kind: rate for request rates"
                    )
        if self.start > self.max:
            raise ValueError(f"search.start {self.start:g} is above search.max {self.max:g}")
        if (
            self.kind == "concurrency"
            and self.num_requests is not None
            and (self.num_requests < self.max)
        ):
            raise ValueError(
                f"search.num_requests is {self.num_requests} but the search may try "
                f"{self.max:g} streams: such a point would never measure the load it names; set "
                f"num_requests to at least {self.max:g}, or leave it out to size each point from "
                "the workload's precision target"
            )
        return self


class BenchSettings(Settings):
    mode: Literal["grid", "search"] = Field(
        "grid",
        description="grid: every load point of `workload.load` on every server setting; "
        "search: per server setting, the SLO edge (see `search`).",
    )
    repeats: int = Field(
        1, ge=1, le=20, description="Runs of each point; >1 gives mean and a confidence interval."
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of the intervals.")
    price_per_hour: float = Field(
        0.0, ge=0, description="Hardware price (currency/hour) for cost per million tokens."
    )
    currency: Label = Field("USD", description="Label for prices (letters, digits, $ € £ ¥).")
    host: str = Field(
        "127.0.0.1",
        description="Where servers bind: a loopback address (127.0.0.1, ::1) unless "
        "allow_non_loopback is true.",
    )
    allow_non_loopback: bool = Field(
        False,
        description="Let servers bind a non-loopback address (bench.host), reachable from other "
        "machines: off unless you mean to expose them; the report shows the address when on.",
    )
    search: SearchSettings = SearchSettings()
    race: bool = Field(
        True,
        description="Across server settings: stop a setting's load points of a workload as "
        "soon as what it measured there shows it cannot reach the best setting so far beyond "
        "noise (its throughput bound, up to the highest load tried or its engine's batch "
        "limit, below the low end of the leader's interval). Grid: the remaining closed-loop "
        "points are skipped (each server point's `raced` says which and why), and a "
        "precision-sized point stops part-way, from its workload's min_requests on, once its own "
        "interval lies below the best row of the pair so far, this setting's earlier points "
        "included; search: the search stops. Put the setting you expect to win first in the "
        "sweep, and a workload's highest load first in its list.",
    )
    quality_gated: Literal["screen", "full"] = Field(
        "screen",
        description="A pair whose variant the quality gate (`report.quality`) already excludes "
        "from ranking, as its evaluate stage shows, cannot win any decision. screen: it is "
        "served on one server setting (its engine's that batches most, which the probe needs), "
        "its server's answers checked but the served task not asked (the gate already withholds "
        "what the task's flag could), and each load point measured at its workload's "
        "`precision.min_requests` (its figures stay in the report, with wider intervals); full: "
        "measured as every other pair, its task included.",
    )
    pairs: dict[str, Pair] = Field(
        {},
        description="The bench stages: `bench@<name>` for each entry, name = <variant>-<engine>. "
        "`quantbench pairs` prints every valid pair of the configured variants and engines.",
    )

    @model_validator(mode="after")
    def _loopback_unless_asked(self) -> BenchSettings:
        problem = host_problem(self.host)  # (a port, a URL: not the loopback question)
        if problem:
            raise ValueError(problem)
        if not is_loopback(self.host) and not self.allow_non_loopback:
            raise ValueError(
                f"host {self.host!r} is not a loopback address: servers would be reachable from "
                "other machines. Use 127.0.0.1, or set bench.allow_non_loopback: true if you mean "
                "to expose them"
            )
        return self

    @model_validator(mode="after")
    def _pair_names(self) -> BenchSettings:
        for name, pair in self.pairs.items():
            expected = f"{pair.variant}-{pair.engine}"
            if name != expected:
                raise ValueError(
                    f"pairs: entry {name!r} must be named {expected!r} (<variant>-<engine>), so "
                    "its stage, folder and report row carry one name"
                )
        return self

    @model_validator(mode="after")
    def _fallbacks_stand_in_for_a_pair(self) -> BenchSettings:
        covered: dict[str, str] = {}
        for name, pair in self.pairs.items():
            target = pair.fallback_for
            if target is None:
                continue
            where = f"pairs.{name}.fallback_for"
            other = self.pairs.get(target)
            if other is None or target == name:
                raise ValueError(
                    f"{where}: {target!r} is not another pair of bench.pairs; name the pair this "
                    f"one stands in for (known: {', '.join(p for p in self.pairs if p != name)})"
                )
            if other.variant != pair.variant:
                raise ValueError(
                    f"{where}: {target} serves {other.variant}, this pair {pair.variant}: a "
                    "fallback serves the same variant on another engine"
                )
            if other.fallback_for is not None:
                raise ValueError(
                    f"{where}: {target} is itself a fallback (for {other.fallback_for}); name "
                    "the pair it stands in for, one fallback deep"
                )
            if target in covered:
                raise ValueError(
                    f"{where}: {covered[target]} is already the fallback for {target}; one "
                    "fallback a pair, so exactly one of them runs on any machine"
                )
            covered[target] = name
        return self
