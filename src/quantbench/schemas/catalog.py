"""Every stage output's schema, in pipeline order (for tests, docs and tools)."""

from __future__ import annotations

from quantbench.schemas.base import StageOutput
from quantbench.schemas.bench import PairSummary
from quantbench.schemas.decide import ConfirmFile
from quantbench.schemas.env import EnvInfo
from quantbench.schemas.estimate import EstimatesFile
from quantbench.schemas.finetune import FinetuneReport
from quantbench.schemas.machine import MachineCalibration, PairCalibration
from quantbench.schemas.merge import MergeReport
from quantbench.schemas.model_info import BaseModelInfo, MergedModelInfo
from quantbench.schemas.quality import QualityReport
from quantbench.schemas.quantize import QuantizeTiming
from quantbench.schemas.session import SessionSummary
from quantbench.schemas.validate import ValidationVerdict
from quantbench.schemas.variant import VariantRecord

STAGE_OUTPUTS: tuple[type[StageOutput], ...] = (
    ValidationVerdict,
    BaseModelInfo,
    FinetuneReport,
    MergeReport,
    MergedModelInfo,
    VariantRecord,
    QuantizeTiming,
    QualityReport,
    EnvInfo,
    MachineCalibration,
    PairCalibration,
    EstimatesFile,
    SessionSummary,
    PairSummary,
    ConfirmFile,
)


def table() -> list[tuple[str, str, int, list[int], str]]:
    """(output, schema module, version, versions readable, command) per stage output."""
    return [
        (
            m.OUTPUT,
            m.__module__,
            m.current_version(),
            m.readable_versions(),
            m.rerun(),
        )
        for m in STAGE_OUTPUTS
    ]


__all__ = ["STAGE_OUTPUTS", "table"]
