"""What ``quantbench plan`` prices a run by before it starts: the hardware, the model's shape and
the traffic, each from the pipeline's own outputs where they exist, else from what stands in for
them, and said.

* hardware: this machine as the ``calibrate`` stage measured it, where the calibration is of
  the device ``runtime.device`` resolves to; else, on a GPU machine, the datasheet entry of the
  GPU found there (:func:`quantbench.estimate.hardware.datasheet_name`); or the entry (or saved
  JSON) asked for with ``--hardware``, whatever this machine is;
* the model's shape: the prepared base (``models/base``) where it was prepared from the model
  the params name; else a local model's own folder, or the ``config.json`` the overlay ships for
  the hub id (its ``model_configs:``), so a 7B hub model is priced before any weight is
  downloaded;
* the traffic: the ``workloads`` stage's files; else each workload generated here as that stage
  generates it, its lengths counted with the model's tokenizer where the model is prepared and in
  words where it is not (close to tokens for these BPE vocabularies).

A prediction of a machine that is not this one takes nothing this machine measured: no pair's
probe, no pair's last start-up (``here`` is False).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantbench.accelerator import detect, resolve_device
from quantbench.accelerator.nvidia import NoGpuError
from quantbench.engines.registry import smallest_context
from quantbench.errors import UserError
from quantbench.estimate.arch import read_architecture
from quantbench.estimate.gpu import describe
from quantbench.estimate.hardware import (
    THIS_MACHINE,
    datasheet_name,
    known_hardware,
    table_entry,
    this_gpu,
)
from quantbench.estimate.lookup import resolve_hardware
from quantbench.load.tokens import load_counter
from quantbench.schemas import io as schema_io
from quantbench.schemas.hardware import HardwareSpec
from quantbench.schemas.machine import MachineCalibration
from quantbench.schemas.model_info import BaseModelInfo, HubSource, LocalSource
from quantbench.workloads.traffic import Traffic, materialize

if TYPE_CHECKING:
    from quantbench.engines.base import EngineSettings
    from quantbench.model import ModelSettings
    from quantbench.schemas.roofline import ModelShape
    from quantbench.workloads.spec import WorkloadSpec


ROOFLINE_ONLY = (
    "; the roofline alone, at the datasheet's peaks and assumed efficiencies, with no engine's "
    "per-step overhead and no pair's probe: a lower bound"
)


@dataclass(frozen=True)
class PricedHardware:
    """The device a plan prices on (``spec`` None: none, ``why_not`` says why)."""

    name: str
    spec: HardwareSpec | None
    here: bool = False
    """This machine as calibrated: its pairs' probes and start-ups apply."""
    gpu: str | None = None
    """The GPU this machine computes on (its probes are of it); None: its CPU."""
    says: str | None = None
    """The plan's line about it (None: this CPU as calibrated, the usual, said nothing)."""
    why_not: str | None = None


def _entry_text(spec: HardwareSpec) -> str:
    """``H100 (80 GB, 3350 GB/s, bf16 989.4 TFLOP/s dense)``: the entry and its figures."""
    bf16 = spec.matmul_tflops.get("bf16")
    peak = f", bf16 {bf16:g} TFLOP/s dense" if bf16 is not None else ""
    return f"{spec.name} ({spec.memory_gb:g} GB, {spec.memory_bandwidth_gbs:g} GB/s{peak})"


def pricing_hardware(
    asked: str | None, calibration: Path, device_setting: str, workloads_dir: Path
) -> PricedHardware:
    """The hardware a plan prices on (see the module docstring)."""
    if asked is not None and asked.lower() != THIS_MACHINE:
        spec = resolve_hardware(asked)
        sheet = spec.gpu is None and spec.measurement is None  # a table entry, not a saved one
        what = f"the datasheet {_entry_text(spec)}" if sheet else spec.name
        tail = ROOFLINE_ONLY if sheet else ""
        return PricedHardware(spec.name, spec, says=f"priced on {what} (--hardware {asked}){tail}")
    try:
        device = resolve_device(device_setting)
    except NoGpuError:
        return PricedHardware(THIS_MACHINE, None, why_not=(
            f"no timing: runtime.device is cuda, and this machine has {detect().describe()}: "
            f"price it for a GPU with --hardware (one of {', '.join(known_hardware()[1:])})"
        ))  # fmt: skip
    gpu = this_gpu(device)
    found = gpu.name if gpu is not None else None
    stored = _calibration(calibration)
    measured = stored.gpu.gpu if stored is not None and stored.gpu is not None else None
    if stored is not None and measured == found:
        says = None
        if stored.gpu is not None:
            says = f"priced on this GPU as calibrated ({calibration}): {describe(stored.gpu)}"
        return PricedHardware(THIS_MACHINE, stored, here=True, gpu=found, says=says)
    if gpu is None:
        why = (
            f"{calibration} measured the GPU {measured!r}, this machine computes on its CPU"
            if stored is not None
            else f"{calibration} or {workloads_dir}/ is missing"
        )
        return PricedHardware(THIS_MACHINE, None, why_not=(
            f"no timing: {why} (`dvc repro calibrate workloads` makes both)"
        ))  # fmt: skip
    calibrated = (
        f"{calibration} is of {measured or 'its CPU'}" if stored is not None else "not calibrated"
    )
    entry_name = datasheet_name(gpu.name, gpu.memory_mib)
    if entry_name is None:
        return PricedHardware(THIS_MACHINE, None, gpu=found, why_not=(
            f"no timing: the GPU found here, {gpu.name}, has no datasheet entry and is "
            f"{calibrated}: `dvc repro calibrate` measures it (or price a listed GPU with "
            "--hardware NAME)"
        ))  # fmt: skip
    entry = table_entry(entry_name)
    assert entry is not None
    return PricedHardware(entry.name, entry, gpu=found, says=(
        f"priced on the datasheet {_entry_text(entry)}: the GPU found here, {gpu.name}, is "
        f"{calibrated} (`dvc repro calibrate` measures it){ROOFLINE_ONLY}"
    ))  # fmt: skip


def _calibration(path: Path) -> HardwareSpec | None:
    return schema_io.read(path, MachineCalibration).hardware if path.is_file() else None


@dataclass(frozen=True)
class PricedModel:
    """The model's shape a plan prices by (``arch`` None: none, ``why_not`` says why)."""

    arch: ModelShape | None
    folder: Path
    """Where its config (and, prepared, its weights and tokenizer) are."""
    prepared: bool
    says: str | None = None
    why_not: str | None = None


def prepared_as(model_dir: Path, settings: ModelSettings) -> bool:
    """Whether ``model_dir`` holds the model ``settings`` name: its ``model_info.json`` records
    the same source (a folder with a config.json and no record counts as it)."""
    if not (model_dir / "config.json").is_file():
        return False
    info = model_dir / "model_info.json"
    if not info.is_file():
        return True

    source = schema_io.read(info, BaseModelInfo).source
    if isinstance(source, HubSource):
        return settings.source == "hub" and (source.hub_id, source.revision) == (
            settings.hub_id,
            settings.revision,
        )
    if isinstance(source, LocalSource):
        return (
            settings.source == "local"
            and settings.path is not None
            and (Path(source.path).resolve() == Path(settings.path).resolve())
        )
    return settings.source == "embedded"


def pricing_model(
    model_dir: Path, settings: ModelSettings, shipped: Mapping[str, Path]
) -> PricedModel:
    """The prepared model's shape, else its own folder's (a local model) or the config.json
    the overlay ships for its hub id (``shipped``) (see the module docstring)."""
    if prepared_as(model_dir, settings):
        return PricedModel(read_architecture(model_dir), model_dir, prepared=True)
    named = settings.hub_id or settings.path or settings.source
    config = None
    if settings.source == "local" and settings.path is not None:
        config = Path(settings.path) / "config.json"
    elif settings.source == "hub" and settings.hub_id in shipped:
        config = shipped[settings.hub_id]
    if config is None or not config.is_file():
        return PricedModel(None, model_dir, prepared=False, why_not=(
            f"no timing: {named} is not prepared ({model_dir}: `dvc repro prepare`), and no "
            "overlay's model_configs holds its config.json"
        ))  # fmt: skip
    return PricedModel(read_architecture(config), config.parent, prepared=False, says=(
        f"the model's shape from {config} ({named} is not prepared here: `dvc repro prepare`)"
    ))  # fmt: skip


def pricing_traffic(
    workloads: Mapping[str, WorkloadSpec],
    folder: Path,
    corpus: Sequence[Path],
    context: int | None,
    tokenizer: Path | None,
) -> tuple[dict[str, Traffic], str | None]:
    """Each workload's traffic: the workloads stage's, else generated here (and a line saying
    which and how they were counted)."""
    out: dict[str, Traffic] = {}
    made = []
    counter: Any = None
    for name, spec in workloads.items():
        try:
            out[name] = Traffic.read(folder, name)
            continue
        except UserError:
            pass
        if counter is None and tokenizer is not None:
            try:
                counter = load_counter(tokenizer)
            except ValueError:
                tokenizer = None
        out[name] = materialize(
            spec, corpus, count=counter.count_text if counter else None,
            cut=counter.cut if counter else None, context=context,
        )  # fmt: skip
        made.append(name)
    if not made:
        return out, None
    counted = "in the model's tokens" if counter is not None else "in words"
    return out, (
        f"lengths of {', '.join(made)} as generated here, counted {counted}: the workloads stage "
        f"has not run ({folder}/)"
    )


def traffic_context(
    arch: ModelShape, pairs: Mapping[str, Any], pair_settings: Callable[[str], EngineSettings]
) -> int | None:
    """The tokens one request may hold, as the workloads stage fits its traffic: the smallest of
    the model's context and every bench pair's (``pair_settings``: the config's)."""
    limits = [
        limit[0]
        for name, pair in pairs.items()
        if (limit := smallest_context(pair.engine, pair_settings(name)))
    ]
    if arch.max_position_embeddings is not None:
        limits.append(arch.max_position_embeddings)
    return min(limits, default=None)
