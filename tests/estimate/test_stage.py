"""The DVC-stage functions: JSON-ready estimates, comparisons, one file for all variants."""

from __future__ import annotations

import json

import pytest

from quantbench.estimate import machine, stage
from quantbench.estimate.compare import MeasuredPoint
from quantbench.estimate.spec import EstimateSettings
from quantbench.schemas.estimate_inputs import EstimatedVariant

from .conftest import fake_cpu


def test_estimate_variant_is_json_ready(tiny_folder):
    out = stage.estimate_variant(tiny_folder, EstimatedVariant(format="bf16"), "L4")
    text = json.dumps(out)
    assert json.loads(text)["weights"]["source"] == "file"
    assert out["prefill"]["bound"] in ("compute", "memory")
    assert set(out["grids"]["engines"]) == {"vllm", "llamacpp", "transformers"}
    assert "comparison" not in out


def test_measured_points_of_the_variant_are_compared(tiny_folder):
    variant = EstimatedVariant(name="base", format="bf16")
    points = [
        MeasuredPoint(variant="base", engine="llamacpp", concurrency=1, tpot_ms=1.0, hardware="L4"),
        MeasuredPoint(
            variant="other", engine="llamacpp", concurrency=1, tpot_ms=1.0, hardware="L4"
        ),
        MeasuredPoint(variant="base", engine="llamacpp", concurrency=1, tpot_ms=1.0),
    ]
    out = stage.estimate_variant(tiny_folder, variant, "L4", measured=points)
    assert [r["variant"] for r in out["comparison"]["rows"]] == ["base"]
    assert out["comparison"]["fits"][0]["engine"] == "llamacpp"


def test_this_machine_is_measured_once_and_refined_per_model(tiny_folder, tmp_path, monkeypatch):
    measured, refined = [], []

    def fake_measured(threads=None, cache_dir=None, remeasure=False):
        measured.append(threads)
        return fake_cpu()

    def fake_refine(spec, dtype, shapes, cache_dir=None):
        refined.append((dtype, sorted(shapes)))
        return spec

    def fake_overhead(spec, engine, cache_dir=None):
        overheads.append(engine)
        return spec

    overheads = []
    monkeypatch.setattr(machine, "measured_this_machine", fake_measured)
    monkeypatch.setattr(stage, "with_shape_probes", fake_refine)
    monkeypatch.setattr(stage, "with_engine_overhead", fake_overhead)
    settings = EstimateSettings(hardware=["this", "H100"])
    variants = {
        "base": EstimatedVariant(name="base", format="bf16"),
        "q4": EstimatedVariant(name="q4", format="gguf", gguf_type="Q4_0"),
    }
    out_path = tmp_path / "reports" / "estimate.json"
    payload = stage.write_estimates(tiny_folder, variants, settings, out_path)
    assert measured == [None]
    assert refined[0] == ("bf16", [(4, 8), (8, 8), (8, 16), (16, 8), (32, 8)])
    # auto engine on a CPU: transformers for bf16, llama.cpp for GGUF
    assert overheads == ["transformers", "llamacpp"]
    written = json.loads(out_path.read_text())
    assert written == payload.model_dump(mode="json") and written["schema_version"] == 3
    assert [(r["variant"], r["hardware"]) for r in written["summary"]] == [
        ("base", "this"),
        ("q4", "this"),
        ("base", "H100"),
        ("q4", "H100"),
    ]
    assert written["summary"][0]["decode_tps_c1"] == pytest.approx(
        1e3 / written["estimates"][0]["best_latency"]["itl_ms"]
    )
