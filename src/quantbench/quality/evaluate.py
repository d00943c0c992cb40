"""evaluate_variant: one harness for every variant, bf16 included.

The merged model (the reference) and the variant each run in their own process over the same
token ids; then perplexity, KL divergence from the reference, top-1 agreement, held-out accuracy
(did the fine-tune's knowledge survive?), size on disk and peak memory go into one report
(:class:`quantbench.schemas.quality.QualityReport`), each quality figure with its interval and
the per-block sums a paired comparison of two variants needs (:mod:`quantbench.quality.intervals`).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

import quantbench.quality.refcache as refcache
from quantbench.accelerator.nvidia import Device
from quantbench.chat import chat_ids
from quantbench.errors import UserError
from quantbench.fidelity import GENERAL_PROMPTS, ReferenceAnswer, reference_answer
from quantbench.formats.registry import get_format
from quantbench.fsutil import file_hashes, tree_digest
from quantbench.params import loaded_plugins
from quantbench.qa import QAItem, load_qa
from quantbench.quality.backends import get_backend
from quantbench.quality.intervals import block_sums, quality_intervals, token_ids_sha256
from quantbench.quality.metrics import TokenStats, compare
from quantbench.quality.spec import EvaluateSettings
from quantbench.quality.windows import plan_windows
from quantbench.quality.worker import Reference, ScoreJob, ScoreResult, run_isolated
from quantbench.quantize.variant import VariantInfo, read_variant
from quantbench.schemas.common import HeldoutAnswer, HeldoutScore
from quantbench.schemas.quality import (
    EvalText,
    EvalTimings,
    PassTimings,
    QualityReport,
    ReferenceInfo,
    WorkerMemory,
)
from quantbench.textfile import read_utf8

log = logging.getLogger(__name__)
# Held-out questions whose answers the served check compares (besides the general prompts).
CHECK_HELDOUT = 3


class EvaluationError(UserError):
    """An input of the evaluation is missing or unusable."""


def _stop_ids(reference_dir: Path, tokenizer: Any) -> frozenset[int]:
    """Token ids that end an answer: generation_config's eos ids plus the tokenizer's eos."""
    ids: set[int] = set()
    gen_path = reference_dir / "generation_config.json"
    if gen_path.is_file():
        eos = json.loads(gen_path.read_text(encoding="utf-8")).get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if not ids:
        raise EvaluationError(f"{reference_dir}: no eos token id in generation_config or tokenizer")
    return frozenset(int(i) for i in ids)


def _eval_ids(tokenizer: Any, eval_text_path: Path, settings: EvaluateSettings) -> list[int]:
    if not eval_text_path.is_file():
        raise EvaluationError(f"evaluation text {str(eval_text_path)!r} does not exist")
    text = read_utf8(eval_text_path, "data.eval")
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if settings.max_tokens is not None:
        ids = ids[: settings.max_tokens]
    if len(ids) < 2:
        raise EvaluationError(f"evaluation text {str(eval_text_path)!r} has fewer than 2 tokens")
    return ids


def _job(
    backend: str,
    path: Path,
    fmt: str,
    settings: EvaluateSettings,
    threads: int,
    ids: list[int],
    prompts: list[list[int]],
    stop_ids: frozenset[int],
    logprob_path: Path | None,
    device: Device = "cpu",
    reference: Reference | None = None,
) -> ScoreJob:
    longest_prompt = max((len(p) for p in prompts), default=0)
    n_ctx = max(settings.context_length, longest_prompt + settings.heldout_max_new_tokens)
    return ScoreJob(
        backend=backend,
        path=path,
        fmt=fmt,
        compute_dtype=settings.compute_dtype,
        threads=threads,
        n_ctx=n_ctx,
        ids=ids,
        windows=plan_windows(len(ids), settings.context_length, settings.stride),
        logprob_path=logprob_path,
        prompts=prompts,
        max_new_tokens=settings.heldout_max_new_tokens,
        stop_ids=stop_ids,
        plugins=loaded_plugins(),
        device=device,
        reference=reference,
    )


def _heldout(
    items: list[QAItem], result: ScoreResult, tokenizer: Any, stop_ids: frozenset[int]
) -> HeldoutScore:
    answers = []
    correct = 0
    for item, generated in zip(items, result.generations, strict=True):
        text = tokenizer.decode(
            [t for t in generated if t not in stop_ids], skip_special_tokens=True
        ).strip()
        ok = item.is_correct(text)
        correct += ok
        answers.append(HeldoutAnswer(question=item.question, expected=item.answer, got=text, ok=ok))
    return HeldoutScore(
        accuracy=correct / len(items) if items else 0.0,
        correct=correct,
        total=len(items),
        answers=answers,
    )


def evaluate_variant(
    name: str,
    variant_dir: str | Path,
    reference_dir: str | Path,
    eval_text_path: str | Path,
    heldout_path: str | Path,
    settings: EvaluateSettings,
    threads: int = 1,
    device: Device = "cpu",
) -> QualityReport:
    """Measure variant `name` against the reference (merged) model, both passes computed on
    ``device``; return the report."""
    from transformers import AutoTokenizer

    variant_dir, reference_dir = Path(variant_dir), Path(reference_dir)
    info = read_variant(variant_dir)
    if info.name != name:
        raise EvaluationError(
            f"{variant_dir}/variant.json names variant {info.name!r}, not {name!r}"
        )
    if not (reference_dir / "config.json").is_file():
        raise EvaluationError(f"reference model folder {str(reference_dir)!r} has no config.json")
    total_start = time.perf_counter()
    # KL "from the merged model" only means something if the variant was made from it.
    source_sha = info.record.source.sha256
    reference_files = file_hashes(reference_dir)  # read once: the source check and the copy's
    reference_sha = tree_digest(reference_files)
    same_source = source_sha == reference_sha
    if not same_source:
        log.warning("%s was not built from %s (source hash differs)", name, reference_dir)
    tokenizer = AutoTokenizer.from_pretrained(reference_dir)
    ids = _eval_ids(tokenizer, Path(eval_text_path), settings)
    items = load_qa(heldout_path)
    if settings.heldout_limit is not None:
        items = items[: settings.heldout_limit]
    # the served check's prompts: a few held-out questions (the fine-tune's certain answers)
    # and general ones (quantbench.fidelity), answered after the held-out ones
    check_prompts = [i.question for i in items[:CHECK_HELDOUT]] + list(GENERAL_PROMPTS)
    questions = [i.question for i in items] + check_prompts
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": q}], True) for q in questions]
    stop_ids = _stop_ids(reference_dir, tokenizer)

    backend = get_format(info.format).quality_backend  # the format says which backend reads it
    model_path = info.weights_path if get_backend(backend).reads_file else variant_dir
    with tempfile.TemporaryDirectory(prefix="quantbench-eval-") as tmp:
        log.info("%s: reference pass (%d tokens)", name, len(ids))
        # The reference answers no held-out questions: the bf16 variant, a copy of the same
        # weights run the same way, reports that accuracy.
        ref_job = _job(
            "hf", reference_dir, "bf16", settings, threads, ids, [], stop_ids,
            Path(tmp) / "reference.f32", device,
        )  # fmt: skip
        var_job = _job(
            backend, model_path, info.format, settings, threads, ids, prompts, stop_ids, None,
            device,
        )  # fmt: skip
        if (backend, info.format) == (ref_job.backend, ref_job.fmt) and _same_model(
            variant_dir, reference_files
        ):
            ref, var = _one_pass(name, ref_job, var_job, reference_sha)
        else:
            ref, var = _two_passes(name, info.format, backend, ref_job, var_job, reference_sha)
    if var.vocab != ref.vocab or var.kl is None:
        raise EvaluationError(
            f"variant {name!r} predicts over {var.vocab} tokens, the reference over {ref.vocab}"
        )
    kl = var.kl
    references = _references(check_prompts, var, len(items), tokenizer, stop_ids)
    var.generations = var.generations[: len(items)]
    report = assemble_report(
        name,
        info,
        reference_dir,
        same_source,
        ref,
        var,
        kl,
        _heldout(items, var, tokenizer, stop_ids),
        settings,
        EvalText(
            path=Path(eval_text_path).as_posix(), tokens=len(ids), ids_sha256=token_ids_sha256(ids)
        ),
        threads,
        total_s=round(time.perf_counter() - total_start, 3),
    )
    return report.model_copy(update={"served_reference": [r.to_dict() for r in references]})


# What the hf backend computes from: a folder's weights and its model config (the tokenizer and
# the generation config the harness takes from the reference alone).
_MODEL_FILES = ("*.safetensors", "model.safetensors.index.json", "config.json")


def _same_model(variant_dir: Path, reference_files: dict[str, str]) -> bool:
    """Whether the variant's weights and config are the reference's byte for byte (the bf16
    variant is a copy of the merge), against the reference's hashes already read."""
    for pattern in _MODEL_FILES:
        theirs = {k: v for k, v in reference_files.items() if Path(k).match(pattern)}
        if file_hashes(variant_dir, pattern) != theirs:
            return False
    return True


def _two_passes(
    name: str, fmt: str, backend: str, ref_job: ScoreJob, var_job: ScoreJob, reference_sha: str
) -> tuple[ScoreResult, ScoreResult]:
    """The reference's pass (computed once a run: quantbench.quality.refcache), then the
    variant's, compared with it row by row as it goes."""
    cached = refcache.load(ref_job, reference_sha)  # the same for every variant: once a run
    if cached is None:
        ref = run_isolated(ref_job)
        ref_file = refcache.store(ref_job, reference_sha, ref)
    else:
        ref, ref_file = cached
    log.info("%s: variant pass (%s, %s backend)", name, fmt, backend)
    var = run_isolated(replace(var_job, reference=Reference(ref_file, ref.vocab)))
    return ref, var


def _one_pass(
    name: str, ref_job: ScoreJob, var_job: ScoreJob, reference_sha: str
) -> tuple[ScoreResult, ScoreResult]:
    """A variant whose files are the reference's, run the same way: its pass is the reference
    pass (one job's passes are bitwise equal from process to process: tests/quality/
    test_evaluate.py), so one process scores the ids and answers the questions, and the variant's
    KL is exactly the 0 a second pass would give (docs/QUANTIZE.md, "The quality harness")."""
    log.info("%s: its files are the reference's: one pass for both", name)
    cached = refcache.load(ref_job, reference_sha)
    if cached is None:
        # the reference's job with the questions added: the scoring and its log-probability
        # file (kept for the other variants) are the reference's; the hf backend reads no n_ctx
        both = run_isolated(replace(ref_job, prompts=var_job.prompts, n_ctx=var_job.n_ctx))
        refcache.store(ref_job, reference_sha, both)
        zero = {k: 0.0 for k in both.timings}
        ref = replace(both, generations=[], margins=[], timings={**both.timings, "heldout_s": 0.0})
        var = replace(both, timings={**zero, "heldout_s": both.timings["heldout_s"]})
    else:
        ref, _ = cached
        answers = run_isolated(replace(var_job, ids=[], windows=[]))
        var = replace(answers, nll=ref.nll, top1=ref.top1, vocab=ref.vocab)
    return ref, replace(var, kl=np.zeros(len(ref.nll)))


def _references(
    prompts: list[str], result: ScoreResult, offset: int, tokenizer: Any, stop_ids: frozenset[int]
) -> list[ReferenceAnswer]:
    """The variant's greedy answers to the check prompts, with their margins."""
    out = []
    for k, prompt in enumerate(prompts):
        tokens = result.generations[offset + k]
        margins = result.margins[offset + k] if result.margins else [0.0] * len(tokens)
        keep = [i for i, t in enumerate(tokens) if t not in stop_ids]
        ids = [tokens[i] for i in keep]
        out.append(
            reference_answer(
                prompt,
                ids,
                [margins[i] for i in keep],
                lambda t: str(tokenizer.decode(t, skip_special_tokens=True)),
            )
        )
    return out


def assemble_report(
    name: str,
    info: VariantInfo,
    reference_dir: Path,
    same_source: bool,
    ref: ScoreResult,
    var: ScoreResult,
    kl: Any,
    heldout: HeldoutScore,
    settings: EvaluateSettings,
    eval_text: EvalText,
    threads: int,
    total_s: float,
) -> QualityReport:
    """The report of one evaluation from its two passes (no model needed: testable alone)."""
    backend = get_format(info.format).quality_backend  # the format says, as it did for the pass
    stats = compare(
        TokenStats(ref.nll, ref.top1), TokenStats(var.nll, var.top1), kl, settings.kl_percentile
    )
    sums = block_sums(ref.nll, var.nll, kl, ref.top1 == var.top1, settings.bootstrap_block_tokens)
    return QualityReport.model_validate(
        {
            **stats,
            "name": name,
            "format": info.format,
            "recipe": info.record.recipe,
            "backend": backend,
            "reference": ReferenceInfo(
                path=reference_dir.as_posix(), is_variant_source=same_source
            ),
            "heldout_accuracy": heldout.accuracy,
            "heldout": heldout,
            "intervals": quality_intervals(sums, heldout, settings.confidence),
            "blocks": sums.to_blocks(),
            "size_bytes": info.size_bytes,
            "weights_bytes": info.record.weights_bytes,
            "bits_per_weight": info.record.bits_per_weight,
            "memory": WorkerMemory.model_validate(var.memory),
            "reference_memory": WorkerMemory.model_validate(ref.memory),
            "settings": settings.model_dump(mode="json"),
            "eval_text": eval_text,
            "threads": threads,
            "timings": EvalTimings(
                reference=PassTimings.model_validate(ref.timings),
                variant=PassTimings.model_validate(var.timings),
                total_s=total_s,
            ),
            "libraries": _versions(info.format),
        }
    )


# what the harness itself runs on, whatever the format
HARNESS_LIBRARIES = ("torch", "transformers", "numpy")


def _versions(fmt: str) -> dict[str, str]:
    """Installed versions of the harness's libraries and those the format declares it loads
    with (``Format.libraries``: GPTQModel for GPTQ, compressed-tensors for AWQ and W8A8, ...)."""
    out = {}
    for dist in dict.fromkeys((*HARNESS_LIBRARIES, *get_format(fmt).libraries)):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out
