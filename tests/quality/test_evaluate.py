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


@pytest.fixture
def counted_jobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list:
    """Every worker job the evaluations of a test start (each a real worker process), with the
    reference cache in the test's own folder."""
    import quantbench.quality.evaluate as evaluate_module

    monkeypatch.setenv("QUANTBENCH_REFERENCE_CACHE", str(tmp_path / "refcache"))
    jobs: list = []
    real = evaluate_module.run_isolated

    def counting(job):  # type: ignore[no-untyped-def]
        jobs.append(job)
        return real(job)

    monkeypatch.setattr(evaluate_module, "run_isolated", counting)
    return jobs


@pytest.mark.slow
def test_a_variant_whose_files_are_the_references_is_scored_once(
    tiny_model_dir: Path, tmp_path: Path, counted_jobs: list
) -> None:
    copy = build_variant("bf16", Bf16Spec(format="bf16"), tiny_model_dir, tmp_path / "bf16")
    first = evaluate("bf16", copy.directory, tiny_model_dir)
    # one process scored the ids (the reference's pass, cached) and answered the questions
    assert len(counted_jobs) == 1
    assert counted_jobs[0].windows and len(counted_jobs[0].prompts) >= 3
    assert first.kl_divergence.max == 0.0 and first.top1_agreement == 1.0
    assert first.perplexity == first.reference_perplexity
    assert first.heldout.total == 3
    assert first.timings.variant.score_s == 0.0 and first.timings.reference.score_s > 0.0

    again = evaluate("bf16", copy.directory, tiny_model_dir)  # the reference pass cached
    assert len(counted_jobs) == 2 and not counted_jobs[1].windows  # the questions alone
    assert again.perplexity == first.perplexity
    assert [a.got for a in again.heldout.answers] == [a.got for a in first.heldout.answers]

    # the same format with other bytes is a variant like any other: its own pass, compared
    other = evaluate("damaged", damage(copy.directory, tmp_path / "damaged"), tiny_model_dir)
    assert len(counted_jobs) == 3 and counted_jobs[2].reference is not None
    assert counted_jobs[2].windows
    assert other.kl_divergence.mean > 0.0 and other.perplexity != first.perplexity


@pytest.mark.slow
def test_one_jobs_passes_are_bitwise_equal_from_process_to_process(
    prepared_base: Path, tmp_path: Path
) -> None:
    """What lets a copy of the reference be scored once: the same job run twice, each in its
    own worker, gives the same bytes (scores, log-probabilities, answers)."""
    import numpy as np
    from transformers import AutoTokenizer

    from quantbench.chat import chat_ids
    from quantbench.qa import load_qa
    from quantbench.quality.evaluate import _eval_ids, _job, _stop_ids
    from quantbench.quality.worker import run_isolated

    tokenizer = AutoTokenizer.from_pretrained(prepared_base)
    ids = _eval_ids(tokenizer, REPO / "data" / "eval.txt", SETTINGS)
    items = load_qa(REPO / "data" / "heldout.jsonl")[:3]
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": i.question}], True) for i in items]
    stop = _stop_ids(prepared_base, tokenizer)
    runs = []
    for name in ("a.f32", "b.f32"):
        job = _job("hf", prepared_base, "bf16", SETTINGS, 1, ids, prompts, stop, tmp_path / name)
        runs.append(run_isolated(job))
    a, b = runs
    assert len(a.nll) == len(ids) - 1
    assert np.array_equal(a.nll, b.nll) and np.array_equal(a.top1, b.top1)
    assert (tmp_path / "a.f32").read_bytes() == (tmp_path / "b.f32").read_bytes()
    assert a.generations == b.generations and all(a.generations)
