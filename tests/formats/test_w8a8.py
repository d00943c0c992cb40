"""int8 W8A8 (SmoothQuant + GPTQ with llm-compressor): recipe, detection, build, quality backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from quantbench.formats.registry import detect, format_names, get_format, recipe
from quantbench.formats.w8a8 import W8a8Spec

REPO = Path(__file__).resolve().parents[2]

# quantization_config of real checkpoints, as llm-compressor 0.14 / compressed-tensors 0.19 wrote
# them for this project (W8A8 from formats/w8a8.py, AWQ from formats/awq.py, both on the tiny
# model), and an fp8 W8A8 one (float weights and activations: not ours, the estimator's fp8).
W8A8_QCONFIG: dict[str, Any] = {
    "config_groups": {
        "group_0": {
            "format": "int-quantized",
            "input_activations": {
                "actorder": None,
                "block_structure": None,
                "dynamic": True,
                "group_size": None,
                "num_bits": 8,
                "observer": None,
                "observer_kwargs": {},
                "scale_dtype": None,
                "strategy": "token",
                "symmetric": True,
                "type": "int",
                "zp_dtype": None,
            },
            "output_activations": None,
            "targets": ["Linear"],
            "weights": {
                "actorder": "static",
                "block_structure": None,
                "dynamic": False,
                "group_size": None,
                "num_bits": 8,
                "observer": "memoryless_minmax",
                "observer_kwargs": {},
                "scale_dtype": None,
                "strategy": "channel",
                "symmetric": True,
                "type": "int",
                "zp_dtype": None,
            },
        }
    },
    "format": "int-quantized",
    "global_compression_ratio": None,
    "ignore": ["lm_head"],
    "kv_cache_scheme": None,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
    "sparsity_config": {},
    "transform_config": {},
    "version": "0.19.0",
}
AWQ_QCONFIG: dict[str, Any] = {
    "config_groups": {
        "group_0": {
            "format": "pack-quantized",
            "input_activations": None,
            "output_activations": None,
            "targets": ["Linear"],
            "weights": {
                "actorder": None,
                "block_structure": None,
                "dynamic": False,
                "group_size": 32,
                "num_bits": 4,
                "observer": "memoryless_minmax",
                "observer_kwargs": {},
                "scale_dtype": None,
                "strategy": "group",
                "symmetric": False,
                "type": "int",
                "zp_dtype": "torch.int8",
            },
        }
    },
    "format": "pack-quantized",
    "ignore": ["lm_head"],
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
    "version": "0.19.0",
}
FP8_QCONFIG: dict[str, Any] = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token"},
        }
    },
}


def config(qconfig: dict[str, Any] | None) -> dict[str, Any]:
    base: dict[str, Any] = {"model_type": "llama", "hidden_size": 576}
    return {**base, "quantization_config": qconfig} if qconfig else base


def write_folder(folder: Path, qconfig: dict[str, Any] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config(qconfig)))
    return folder


def test_defaults() -> None:
    spec = recipe({"format": "w8a8"})
    assert isinstance(spec, W8a8Spec)
    assert spec.smoothing_strength == 0.8
    assert (spec.weight_strategy, spec.weight_observer) == ("channel", "minmax")
    assert spec.activations == "dynamic-per-token"
    assert spec.dampening_frac == 0.01 and spec.ignore == ("lm_head",)
    assert spec.calibration.samples is None and spec.calibration.max_tokens == 512
    assert get_format("w8a8").needs_calibration(spec)
    assert get_format("w8a8").quality_backend == "hf"


def test_settings_parse() -> None:
    spec = recipe(
        {
            "format": "w8a8",
            "smoothing_strength": None,
            "weight_observer": "mse",
            "dampening_frac": 0.1,
            "ignore": ["lm_head", "re:.*down_proj"],
            "calibration": {"samples": 4, "max_tokens": 128},
        }
    )
    assert spec.smoothing_strength is None and spec.weight_observer == "mse"
    assert spec.ignore == ("lm_head", "re:.*down_proj")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"smoothing_strength": 0}, "smoothing_strength"),
        ({"smoothing_strength": 1.5}, "smoothing_strength"),
        ({"weight_strategy": "group"}, "weight_strategy"),
        ({"weight_observer": "percentile"}, "weight_observer"),
        ({"activations": "static-per-tensor"}, "activations"),
        ({"dampening_frac": 0}, "dampening_frac"),
        ({"ignore": ["model.layers.0.mlp.down_proj"]}, "must contain 'lm_head'"),
        ({"bits": 4}, "Extra inputs are not permitted"),
        ({"group_size": 64}, "Extra inputs are not permitted"),
    ],
)
def test_bad_recipes_name_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        recipe({"format": "w8a8", **raw})


def test_no_group_size_to_check_against_the_model() -> None:
    from types import SimpleNamespace

    spec = recipe({"format": "w8a8"})
    get_format("w8a8").validate_against_model(
        "w8a8", spec, SimpleNamespace(hidden_size=576, intermediate_size=1536)
    )


def test_matches_tells_w8a8_from_awq_and_fp8() -> None:
    w8a8, awq = get_format("w8a8"), get_format("awq")
    folder = Path(".")
    assert w8a8.matches(folder, config(W8A8_QCONFIG))
    assert not awq.matches(folder, config(W8A8_QCONFIG))
    assert awq.matches(folder, config(AWQ_QCONFIG))
    assert not w8a8.matches(folder, config(AWQ_QCONFIG))
    for other in (FP8_QCONFIG, {"quant_method": "gptq", "bits": 4}, None):
        assert not w8a8.matches(folder, config(other))
    assert not w8a8.matches(folder, None)


def test_registry_detects_it(tmp_path: Path) -> None:
    names = format_names()
    assert names.index("w8a8") < names.index("bf16")
    assert detect(write_folder(tmp_path / "w8a8", W8A8_QCONFIG)) == "w8a8"
    assert detect(write_folder(tmp_path / "awq", AWQ_QCONFIG)) == "awq"
    assert detect(write_folder(tmp_path / "bf16", None)) == "bf16"


def test_estimator_fields() -> None:
    fmt = get_format("w8a8")
    assert fmt.estimator_fields(recipe({"format": "w8a8"}), None, None) == {"format": "w8a8"}
    assert fmt.estimator_fields(None, None, config(W8A8_QCONFIG)) == {"format": "w8a8"}


def test_recipe_modifiers() -> None:
    pytest.importorskip("llmcompressor")
    from quantbench.formats.w8a8 import recipe_modifiers

    smooth, gptq = recipe_modifiers(recipe({"format": "w8a8", "smoothing_strength": 0.5}))
    assert type(smooth).__name__ == "SmoothQuantModifier" and smooth.smoothing_strength == 0.5
    scheme = gptq.config_groups["group_0"]
    assert (scheme.weights.num_bits, scheme.weights.strategy, scheme.weights.symmetric) == (
        8,
        "channel",
        True,
    )
    acts = scheme.input_activations
    assert (acts.num_bits, acts.strategy, acts.dynamic, acts.symmetric) == (8, "token", True, True)
    assert gptq.ignore == ["lm_head"]
    (only,) = recipe_modifiers(recipe({"format": "w8a8", "smoothing_strength": None}))
    assert type(only).__name__ == "GPTQModifier"


@pytest.mark.slow
def test_build_is_deterministic_and_the_harness_loads_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Twice on the tiny model (seconds): byte-identical folders, int8 tensors, and the quality
    backend runs it with int8-rounded activations (switching that rounding off moves the
    logits)."""
    import numpy as np
    from safetensors import safe_open

    from quantbench.fsutil import sha256_tree
    from quantbench.quality.backends import HFBackend
    from quantbench.quantize import build_variant

    spec = recipe({"format": "w8a8", "calibration": {"samples": 6, "max_tokens": 128}})
    calibration = REPO / "data" / "calibration.txt"
    infos = [
        build_variant("w8a8", spec, tiny_model_dir, tmp_path / run, calibration, threads=1)
        for run in ("a", "b")
    ]
    assert sha256_tree(infos[0].directory) == sha256_tree(infos[1].directory)
    folder = infos[0].directory
    assert detect(folder) == "w8a8"
    assert json.loads((folder / "config.json").read_text())["quantization_config"]["format"] == (
        "int-quantized"
    )
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        q = handle.get_tensor("model.layers.0.self_attn.q_proj.weight")
        scale = handle.get_tensor("model.layers.0.self_attn.q_proj.weight_scale")
        names = set(handle.keys())
    assert "lm_head.weight" not in names  # tied to the embeddings, left in bf16
    assert str(q.dtype) == "torch.int8" and tuple(scale.shape) == (q.shape[0], 1)
    assert infos[0].record.libraries["llmcompressor"].startswith("0.14")

    backend = HFBackend.load(folder, "w8a8", "float32")
    ids = [1, 504, 3458, 314, 1135, 22]
    quantized = np.array(backend.logits(ids))
    assert np.isfinite(quantized).all()
    for module in backend.model.modules():
        if getattr(module, "quantization_scheme", None) is not None:
            module.quantization_enabled = False
    assert not np.allclose(quantized, backend.logits(ids))
