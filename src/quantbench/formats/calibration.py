"""Calibration text for GPTQ and AWQ: passages split at blank lines, taken in file order.

The file's sha256 and the passages actually used are recorded in variant.json, so a variant says
exactly which text shaped its scales.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from quantbench.formats.base import CalibrationSpec, VariantSpecError
from quantbench.fsutil import sha256_file
from quantbench.textfile import read_utf8

_BLANK_LINES = re.compile(r"\n\s*\n")


@dataclass(frozen=True)
class Calibration:
    """The passages a quantizer sees, and where they came from."""

    path: Path
    sha256: str
    texts: list[str]
    available: int
    max_tokens: int

    def describe(self) -> dict[str, object]:
        return {
            "path": self.path.as_posix(),
            "sha256": self.sha256,
            "samples_used": len(self.texts),
            "samples_available": self.available,
            "max_tokens": self.max_tokens,
        }


def split_passages(text: str) -> list[str]:
    """Passages separated by one or more blank lines, stripped, empty ones dropped."""
    return [p.strip() for p in _BLANK_LINES.split(text.replace("\r\n", "\n")) if p.strip()]


def load_calibration(name: str, path: Path, spec: CalibrationSpec) -> Calibration:
    """Read the first `spec.samples` passages (all when null) of the calibration file."""
    try:
        text = read_utf8(path, "data.calibration")
    except FileNotFoundError:
        raise VariantSpecError(
            f"variant {name!r}: calibration file {str(path)!r} does not exist; set "
            "data.calibration in params.yaml to a text file of passages separated by blank lines"
        ) from None
    except UnicodeDecodeError as exc:
        raise VariantSpecError(
            f"variant {name!r}: calibration file {str(path)!r} is not UTF-8 text ({exc})"
        ) from None
    passages = split_passages(text)
    if not passages:
        raise VariantSpecError(f"variant {name!r}: calibration file {str(path)!r} has no passages")
    chosen = passages if spec.samples is None else passages[: spec.samples]
    return Calibration(
        path=Path(path),
        sha256=sha256_file(path),
        texts=chosen,
        available=len(passages),
        max_tokens=spec.max_tokens,
    )
