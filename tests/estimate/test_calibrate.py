"""The `calibrate` stage: this machine measured once, as a stage output the estimate reads.

The estimate used to measure `hardware: this` itself and keep the figures in ~/.cache/quantbench,
a file DVC did not know; these tests hold it to the calibration instead.
"""

from __future__ import annotations

import os

import pytest

from quantbench.engines import transformers as transformers_engine
from quantbench.estimate import calibrate, machine, stage
from quantbench.estimate.arch import read_architecture
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.spec import EstimateSettings
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.hardware import EngineOverhead, shape_key

from .conftest import fake_cpu


def whole_calibration(folder, threads: int | None = None):
    """A fake measured spec holding every probe a calibration of this model has."""
    spec = fake_cpu()
    shapes = {shape_key(r, c): 5.0 for r, c in read_architecture(folder).streamed_shape_shares()}
    overhead = EngineOverhead(per_layer_ms=0.5, per_step_ms=2.0, version="t", method="fake")
    measurement = spec.measurement.model_copy(
        update={
            "threads": threads or len(os.sched_getaffinity(0)),
            "gemv_gbs": {"bf16": {512: 5.0}, "fp32": {512: 6.0}},
            "gemv_shape_gbs": {d: dict(shapes) for d in machine.PROBED_GEMV_DTYPES},
            "engine_overheads": {"transformers": overhead},
        }
    )
    return spec.model_copy(update={"measurement": measurement})


@pytest.fixture
def no_measuring(monkeypatch):
    """Any measurement or cache write fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the estimate measured or cached instead of using the calibration")

    for module, name in [
        (machine, "measured_this_machine"),
        (machine, "measure_machine"),
        (machine, "save_measured"),
        (machine, "_gemv_shape_gbs"),
        (transformers_engine, "measure_overhead"),
    ]:
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(machine, "cpu_model", lambda: "test cpu")


def test_the_estimate_reads_this_machine_from_the_calibration(tiny_folder, tmp_path, no_measuring):
    calibration = whole_calibration(tiny_folder)
    spec = calibrate.check_calibration(calibration, tiny_folder, None, "this.json")
    settings = EstimateSettings(hardware=["this", "L4"])
    variants = {
        "base": EstimatedVariant(name="base", format="bf16"),
        "q4": EstimatedVariant(name="q4", format="gguf", gguf_type="Q4_0"),
    }
    out = tmp_path / "estimates.json"
    payload = stage.write_estimates(tiny_folder, variants, settings, out, calibration=spec)
    this = [e for e in payload.estimates if e.hardware_name == "this"]
    assert len(this) == 2 and all(e.hardware.name == "fake cpu" for e in this)
    # the transformers overhead came from the calibration: per-step + per-layer, in the estimate
    assert this[0].engine == "transformers"


def test_a_calibration_of_another_machine_or_model_is_refused(tiny_folder, no_measuring):
    whole = whole_calibration(tiny_folder)
    assert calibrate.lacking(whole, tiny_folder) == []
    other_cpu = whole.model_copy(
        update={"measurement": whole.measurement.model_copy(update={"cpu_model": "AMD EPYC"})}
    )
    with pytest.raises(EstimateInputError, match=r"measured on 'AMD EPYC'.*dvc repro calibrate"):
        calibrate.check_calibration(other_cpu, tiny_folder, None, "this.json")
    with pytest.raises(EstimateInputError, match="measured with .* threads, .* asks for 64"):
        calibrate.check_calibration(whole, tiny_folder, 64, "this.json")
    fewer = whole.measurement.model_copy(
        update={"gemv_shape_gbs": {"bf16": {"8x8": 1.0}}, "engine_overheads": {}}
    )
    with pytest.raises(EstimateInputError) as info:
        calibrate.check_calibration(
            whole.model_copy(update={"measurement": fewer}), tiny_folder, None, "this.json"
        )
    text = str(info.value)
    assert "bf16 probes at the model's shapes" in text and "fp32 probes" in text
    assert "the transformers overhead" in text
    datasheet = whole.model_copy(update={"measurement": None})
    with pytest.raises(EstimateInputError, match="datasheet entry, not a calibration"):
        calibrate.check_calibration(datasheet, tiny_folder, None, "this.json")


def test_calibrate_probes_every_dtype_at_the_models_shapes(tiny_folder, monkeypatch):
    monkeypatch.setattr(machine, "measure_machine", lambda threads=None: fake_cpu())
    monkeypatch.setattr(machine, "_gemv_shape_gbs", lambda dtype, r, c, llc: float(r + c))
    overhead = EngineOverhead(per_layer_ms=0.5, per_step_ms=2.0, version="t", method="fake")
    monkeypatch.setattr(transformers_engine, "measure_overhead", lambda threads: overhead)
    spec = calibrate.calibrate(tiny_folder, threads=1)
    assert calibrate.lacking(spec, tiny_folder) == []
    assert spec.measurement.gemv_shape_gbs["fp32"]["8x16"] == 24.0


@pytest.mark.slow
@pytest.mark.timing  # measures this machine's rates: run alone
def test_calibrate_on_this_machine(tiny_folder) -> None:
    spec = calibrate.calibrate(tiny_folder, threads=1)
    assert calibrate.lacking(spec, tiny_folder) == []
    assert calibrate.check_calibration(spec, tiny_folder, 1, "this.json") is spec
