"""Every stage output's schema, in pipeline order (for tests, docs and tools).

``python -m quantbench.schemas.catalog`` prints the table of docs/ARCHITECTURE.md ("Stage
outputs and their schemas"), which a test holds equal to this list.
"""

from __future__ import annotations

from quantbench.schemas.base import StageOutput
from quantbench.schemas.bench import PairSummary
from quantbench.schemas.best_config import NoneFound, Recommended
from quantbench.schemas.code import CodeStamp
from quantbench.schemas.decide import ConfirmFile
from quantbench.schemas.env import EnvInfo
from quantbench.schemas.estimate import EstimatesFile
from quantbench.schemas.finetune import FinetuneReport
from quantbench.schemas.machine import MachineCalibration, PairCalibration
from quantbench.schemas.merge import MergeReport
from quantbench.schemas.model_info import BaseModelInfo, MergedModelInfo
from quantbench.schemas.quality import QualityReport
from quantbench.schemas.quantize import QuantizeTiming
from quantbench.schemas.records import RecordLine
from quantbench.schemas.report_metrics import ReportMetrics
from quantbench.schemas.session import SessionSummary
from quantbench.schemas.validate import ValidationVerdict
from quantbench.schemas.variant import VariantRecord
from quantbench.schemas.workloads import TrafficLine, WorkloadSummary

STAGE_OUTPUTS: tuple[type[StageOutput], ...] = (
    ValidationVerdict,
    CodeStamp,
    BaseModelInfo,
    WorkloadSummary,
    TrafficLine,
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
    RecordLine,
    SessionSummary,
    PairSummary,
    ConfirmFile,
    Recommended,
    NoneFound,
    ReportMetrics,
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


def _shown(template: str) -> str:
    """A path or stage template as the docs show it: ``{load_point}`` -> ``<load point>``."""
    out = template.replace("r{repeat}", "r<k>")
    while "{" in out:
        start = out.index("{")
        end = out.index("}", start)
        out = out[:start] + "<" + out[start + 1 : end].replace("_", " ") + ">" + out[end + 1 :]
    return out


def markdown_table() -> str:
    """The catalogue as the markdown table docs/ARCHITECTURE.md shows."""
    lines = [
        "| output | schema | version | readable versions | regenerate with |",
        "|---|---|---|---|---|",
    ]
    for model in STAGE_OUTPUTS:
        module = model.__module__.removeprefix("quantbench.")
        readable = ", ".join(str(v) for v in model.readable_versions())
        lines.append(
            f"| `{_shown(model.OUTPUT)}` | `{module}.{model.__name__}` | "
            f"{model.current_version()} | {readable} | `dvc repro {_shown(model.STAGE)}` |"
        )
    return "\n".join(lines) + "\n"


__all__ = ["STAGE_OUTPUTS", "markdown_table", "table"]

if __name__ == "__main__":
    print(markdown_table(), end="")
