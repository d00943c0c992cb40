"""`build_variant`: validate, build with the format's quantizer, describe.

Everything that can be checked without running a quantizer is checked first (name, recipe against
the model's shapes, calibration file), so a bad recipe fails in a second, not after minutes. The
quantizer itself is the format's (`quantbench.formats.<format>`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from quantbench.accelerator.nvidia import Device
from quantbench.formats.base import VariantSpecError, validate_name
from quantbench.formats.build import BuildRequest
from quantbench.formats.calibration import load_calibration
from quantbench.formats.registry import get_format
from quantbench.hfconfig import read_hf_config
from quantbench.progress import step
from quantbench.quantize.variant import (
    VariantInfo,
    library_versions,
    source_description,
    write_variant_json,
)
from quantbench.textfile import NotUtf8Error, read_utf8

log = logging.getLogger(__name__)


def model_shapes(merged_dir: Path) -> SimpleNamespace:
    """The widths validation needs, read from config.json (no weights loaded)."""
    config = read_hf_config(merged_dir)
    text = config.get("text_config") or config
    return SimpleNamespace(
        hidden_size=int(text["hidden_size"]), intermediate_size=int(text["intermediate_size"])
    )


def validate_variant(name: str, spec: Any, merged_dir: Path, calibration_path: Path | None) -> None:
    """All checks that run before any quantizer: raise VariantSpecError naming the fix."""
    validate_name(name)
    if not (Path(merged_dir) / "config.json").is_file():
        raise VariantSpecError(
            f"variant {name!r}: source model folder {str(merged_dir)!r} has no config.json "
            "(run the merge stage first)"
        )
    fmt = get_format(spec.format)
    fmt.validate_against_model(name, spec, model_shapes(Path(merged_dir)))
    check_calibration_file(name, spec, calibration_path)


def check_calibration_file(name: str, spec: Any, path: Path | None) -> None:
    """A calibrating recipe needs its calibration text to exist and hold at least one passage."""
    if not get_format(spec.format).needs_calibration(spec):
        return
    if path is None or not Path(path).is_file():
        raise VariantSpecError(
            f"variant {name!r} (format {spec.format}) needs calibration text, but the "
            f"calibration file {str(path)!r} does not exist; set data.calibration in params.yaml "
            "to a UTF-8 text file of passages separated by blank lines"
        )
    try:
        text = read_utf8(path, "data.calibration")
    except NotUtf8Error as exc:
        raise VariantSpecError(
            f"variant {name!r} (format {spec.format}) needs calibration text: {exc}"
        ) from None
    if not text.strip():
        raise VariantSpecError(
            f"variant {name!r} (format {spec.format}) needs calibration text, but the "
            f"calibration file {str(path)!r} is empty; give passages separated by blank lines"
        )


def _num_parameters(merged_dir: Path) -> int | None:
    """Parameter count of the source, from its safetensors headers (no weights loaded)."""
    from safetensors import safe_open

    total = 0
    files = sorted(merged_dir.glob("*.safetensors"))
    if not files:
        return None
    for path in files:
        with safe_open(str(path), framework="numpy") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shape = handle.get_slice(key).get_shape()
                count = 1
                for dim in shape:
                    count *= int(dim)
                total += count
    return total


def build_variant(
    name: str,
    spec: Any,
    merged_dir: str | Path,
    out_dir: str | Path,
    calibration_path: str | Path | None = None,
    threads: int = 1,
    device: Device = "cpu",
) -> VariantInfo:
    """Build variant `name` from the merged model into the empty folder `out_dir`.

    `calibration_path` is the calibration text (needed by gptq and awq); `device` is where a
    calibrating quantizer computes (runtime.device resolved). Returns the variant's
    description (also written to out_dir/variant.json); `.timings` holds wall times in seconds.
    """
    merged_dir, out_dir = Path(merged_dir), Path(out_dir)
    cal_path = Path(calibration_path) if calibration_path is not None else None
    validate_variant(name, spec, merged_dir, cal_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    if any(out_dir.iterdir()):
        raise VariantSpecError(f"variant {name!r}: output folder {out_dir} is not empty")
    calibration = None
    fmt = get_format(spec.format)
    if fmt.needs_calibration(spec):
        assert cal_path is not None
        calibration = load_calibration(name, cal_path, spec.calibration)
    request = BuildRequest(name, spec, merged_dir, out_dir, calibration, threads, device)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    with step(f"variant {name}: {spec.format}"):  # a line a minute in a log while it runs
        result = fmt.build(request)
    timings["quantize_s"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    info = write_variant_json(
        out_dir,
        name=name,
        recipe=spec,
        weights_file=result.weights_file,
        source=source_description(merged_dir),
        calibration=calibration.describe() if calibration else None,
        libraries=library_versions(spec.format, result.libraries),
        num_parameters=_num_parameters(merged_dir),
        details=result.details,
    )
    timings["describe_s"] = round(time.perf_counter() - start, 3)
    info.timings = timings
    return info
