"""The harness on the real embedded model: the baseline matches itself exactly, a deliberately
damaged variant scores worse on every measure, and a GGUF Q8_0 (run by llama.cpp on the same token
ids) stays close to the reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.formats.bf16 import Bf16Spec
from quantbench.formats.gguf import GgufSpec
from quantbench.quality import EvaluateSettings, evaluate_variant
from quantbench.quantize import build_variant
from quantbench.quantize.variant import write_variant_json
from quantbench.schemas.quality import QualityReport

REPO = Path(__file__).resolve().parents[2]
# Small but real: 384 tokens of the shipped evaluation text, 3 held-out questions.
SETTINGS = EvaluateSettings(
    context_length=128, stride=64, max_tokens=384, heldout_limit=3, heldout_max_new_tokens=12
)


def evaluate(name: str, variant: Path, reference: Path) -> QualityReport:
    return evaluate_variant(
        name,
        variant,
        reference,
        REPO / "data" / "eval.txt",
        REPO / "data" / "heldout.jsonl",
        SETTINGS,
        threads=1,
    )


@pytest.fixture(scope="module")
def bf16_variant(prepared_base: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("variants") / "bf16"
    return build_variant("bf16", Bf16Spec(format="bf16"), prepared_base, out).directory


def damage(source: Path, out: Path) -> Path:
    """The bf16 model with every linear weight rounded to 2 bits per 64-column group."""
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file() and path.name not in ("model.safetensors", "variant.json"):
            (out / path.name).write_bytes(path.read_bytes())
    tensors = load_file(source / "model.safetensors")
    for key, weight in tensors.items():
        if key.endswith("proj.weight"):
            rows, cols = weight.shape
            groups = weight.float().reshape(rows, cols // 64, 64)
            scale = groups.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 1.5
            rounded = (groups / scale).round().clamp(-2, 1) * scale
            tensors[key] = rounded.reshape(rows, cols).to(weight.dtype)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    write_variant_json(
        out,
        name="damaged",
        recipe=Bf16Spec(format="bf16"),
        weights_file="model.safetensors",
        source={"path": source.as_posix()},
        calibration=None,
        libraries={},
        num_parameters=None,
    )
    return out


@pytest.mark.slow
def test_baseline_matches_itself_and_damage_scores_worse(
    prepared_base: Path, bf16_variant: Path, tmp_path: Path
) -> None:
    base = evaluate("bf16", bf16_variant, prepared_base)
    assert base.tokens == 383  # 384 ids, the first has no prediction
    assert base.kl_divergence.max == 0.0
    assert base.perplexity_ratio == pytest.approx(1.0, abs=1e-9)
    assert base.top1_agreement == 1.0
    assert base.heldout.total == 3 and len(base.heldout.answers) == 3
    assert base.memory.peak_rss_bytes > base.memory.before_load_rss_bytes
    assert base.size_bytes > 250e6
    assert base.reference.is_variant_source is True

    bad = evaluate("damaged", damage(bf16_variant, tmp_path / "damaged"), prepared_base)
    assert bad.perplexity > 1.2 * base.perplexity
    assert bad.kl_divergence.mean > 0.1
    key, p99 = bad.kl_divergence.high or ("", 0.0)
    assert key == "p99" and p99 > bad.kl_divergence.mean
    assert bad.top1_agreement < 0.9
    assert bad.reference.is_variant_source is False  # its variant.json names no source hash


@pytest.mark.slow
def test_gguf_q8_0_is_close_to_the_reference_on_the_same_ids(
    prepared_base: Path, tmp_path: Path
) -> None:
    variant = build_variant(
        "gguf-q8_0", GgufSpec(format="gguf", type="Q8_0"), prepared_base, tmp_path / "q8"
    )
    report = evaluate("gguf-q8_0", variant.directory, prepared_base)
    assert report.backend == "gguf"
    assert report.tokens == 383
    assert abs(report.perplexity_ratio - 1.0) < 0.03
    assert 0.0 < report.kl_divergence.mean < 0.03
    assert report.top1_agreement > 0.9
    # llama.cpp maps the file: memory well under the bf16 model's
    assert report.memory.peak_rss_bytes < 1.5e9


def test_a_report_records_the_libraries_its_format_declares() -> None:
    """The harness's own libraries and the format's (Format.libraries), not a list kept here:
    GPTQModel for a GPTQ variant, llm-compressor's for AWQ; a library not installed is left out."""
    import contextlib
    from importlib import metadata

    from quantbench.formats.registry import get_format
    from quantbench.quality.evaluate import HARNESS_LIBRARIES, _versions

    for fmt in ("gptq", "awq", "bf16"):
        wanted = {*HARNESS_LIBRARIES, *get_format(fmt).libraries}
        installed = set()
        for dist in wanted:
            with contextlib.suppress(metadata.PackageNotFoundError):
                installed.add((dist, metadata.version(dist)))
        assert set(_versions(fmt).items()) == installed, fmt
    assert "gptqmodel" in _versions("gptq") and "gptqmodel" not in _versions("awq")
