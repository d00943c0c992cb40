"""``reports/decide/confirm.json`` (stage ``decide``): the confirming measurements.

Written by ``stages/decide.py`` from :func:`quantbench.decision.confirm.run_duels`. After every
bench stage, the decision is screened (docs/BENCH.md, "How the decision is made"); two kinds of
comparison are then measured again, in alternation (A B, then B A, ...), each with its servers
started once for the stage:

* **contender**: a row not yet separable from the leader of its workload, against the leader;
* **tuned-vs-default**: a swept pair whose best setting claimed a gain over its default, the
  best row against the default's best row, measured anew so the gain reported did not take part
  in choosing the best (the selection's own measurements favour whichever setting was lucky).

Each round measures each side once (one more repeat of its load point, with its own prompts and
seed); the rounds' paired log ratios are pooled (``contrast``). The rounds' raw records are kept
beside this file (``records``, relative to it).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from quantbench.precision import Figure
from quantbench.schemas.base import Migrations, StageOutput, Strict, version


class Measured(Strict):
    """One side of one round: the row measured once more."""

    key: str = Field(description="pair/server point/workload/load point of the row.")
    figure: Figure | None = Field(description="The ranked figure of this measurement.")
    slo_verdict: Literal["pass", "fail", "undecided"] | None = None
    rankable: bool = Field(False, description="It met its SLO and every check this time too.")
    flags: list[str] = Field(default_factory=list)
    records: str | None = Field(None, description="Its records, relative to this file.")
    wall_s: float = 0.0
    error: str | None = None


class Round(Strict):
    index: int = Field(description="1, 2, ...")
    order: Literal["ab", "ba"] = Field(description="Which side ran first in this round.")
    a: Measured
    b: Measured


class PooledContrast(Strict):
    """log(a / b) pooled over the rounds (quantbench.decision.compare.pooled)."""

    log_ratio: float
    se: float
    df: float
    how: str
    ratio: float
    low: float
    high: float
    confidence: float


class Duel(Strict):
    workload: str
    purpose: Literal["contender", "tuned-vs-default"]
    a: str = Field(description="The contender, or the tuned row (its key).")
    b: str = Field(description="The leader, or the default's best row (its key).")
    metric: str = Field(description="The ranked figure compared.")
    screened: str = Field(description="What the screening said before these rounds.")
    rounds: list[Round] = Field(default_factory=list)
    contrast: PooledContrast | None = None
    verdict: str | None = Field(
        None, description="faster / slower / equivalent / not yet separable (a against b)."
    )
    stopped: str = Field("", description="Why no further round ran.")


class ServerUse(Strict):
    pair: str
    server_point: str
    ready_seconds: float | None = None
    peak_rss_bytes: int | None = None
    error: str | None = None


class ConfirmFile(StageOutput):
    """The decide stage's confirming measurements."""

    OUTPUT: ClassVar[str] = "reports/decide/confirm.json"
    STAGE: ClassVar[str] = "decide"
    MIGRATIONS: ClassVar[Migrations] = {}

    schema_version: Literal[1] = version(1)
    enabled: bool = True
    budget_s: float
    min_rounds: int = Field(
        2, description="Rounds a duel needs before its pooled figure replaces the screening's."
    )
    max_rounds: int
    wall_s: float
    duels: list[Duel] = Field(default_factory=list)
    servers: list[ServerUse] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def for_workload(self, workload: str) -> list[Duel]:
        return [d for d in self.duels if d.workload == workload]
