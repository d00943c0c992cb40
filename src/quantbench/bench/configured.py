"""What the bench and decide stages read of params.yaml: the validated config, by what it holds.

:class:`quantbench.config.Config` (``load_config``) composes every section's settings, the
bench's among them, so it sits above ``bench`` in the layers (tools/layers.py) and cannot be
named here. :class:`PipelineConfig` names what the bench reads of it instead; a ``Config`` is one
(mypy holds it to that where a stage passes one), and a test or a tool may pass any object that
is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from quantbench.bench.spec import BenchSettings
from quantbench.data import DataSettings
from quantbench.engines.base import EngineSettings
from quantbench.estimate.spec import EstimateSettings
from quantbench.formats.base import Recipe
from quantbench.quality.spec import EvaluateSettings, ServedTaskSettings
from quantbench.report.spec import ReportSettings
from quantbench.slo import Slo
from quantbench.workloads.spec import WorkloadSpec


class PipelineConfig(Protocol):
    """The validated params.yaml as the bench and decide stages read it."""

    @property
    def slo(self) -> Slo: ...

    @property
    def workloads(self) -> Mapping[str, WorkloadSpec]: ...

    @property
    def variants(self) -> Mapping[str, Recipe]: ...

    @property
    def bench(self) -> BenchSettings: ...

    @property
    def estimate(self) -> EstimateSettings: ...

    @property
    def report(self) -> ReportSettings: ...

    @property
    def served_task(self) -> ServedTaskSettings: ...

    @property
    def evaluate(self) -> EvaluateSettings: ...

    @property
    def data(self) -> DataSettings: ...

    def engine(self, name: str) -> EngineSettings:
        """An engine's settings (``engines.<name>``)."""
        ...

    def pair_settings(self, name: str) -> EngineSettings:
        """A bench pair's engine settings: its engine's, with the pair's own laid over."""
        ...
