"""The merged model's pass over the evaluation ids, computed once for every variant's evaluation.

Each ``evaluate@<variant>`` stage compares a variant with the same reference: the merged model
scored on the same token ids, in the same windows, in the same compute dtype. Computing it once
per stage cost a worker process, a model load and a scoring pass each time (about 12 s of each
of the default run's six evaluations). The first evaluation keeps its result in a cache keyed by
everything that determines it (the reference folder's hash, the ids, the windows, the compute
dtype, the threads, the device, the answer batch's width); the others read it where it lies (a
variant's pass reads the file as it goes: nothing is copied). The cache is outside DVC, like any
build cache: a missing or torn entry is computed again, and only the newest entry is kept, so it
never holds more than one pass's log-probabilities (rows x vocabulary float32, 1.9 GB for the
default run's 9,854 tokens).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np

from quantbench.quality.backends import get_backend
from quantbench.quality.worker import ScoreJob, ScoreResult

log = logging.getLogger(__name__)
CACHE_ENV = "QUANTBENCH_REFERENCE_CACHE"
FILES = ("logprobs.f32", "nll.npy", "top1.npy", "meta.json")


def default_root() -> Path:
    return Path(os.environ.get(CACHE_ENV, ".cache/quantbench/reference"))


def key(job: ScoreJob, reference_sha: str) -> str:
    """What determines the reference pass (never the logprob file's own path)."""
    blob = json.dumps(
        {
            "reference": reference_sha,
            "backend": job.backend,
            "fmt": job.fmt,
            "dtype": job.compute_dtype,
            "threads": job.threads,
            "device": job.device,  # a GPU's kernels sum in another order than the CPU's
            "n_ctx": job.n_ctx,
            "ids": hashlib.sha256(np.asarray(job.ids, dtype=np.int64).tobytes()).hexdigest(),
            "windows": [(w.start, w.end, w.first_target) for w in job.windows],
            "prompts": job.prompts,
            "max_new_tokens": job.max_new_tokens,
            # a batch's width orders the sums of its matrix products: a near-tie can turn
            "answer_batch": get_backend(job.backend).answer_batch,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def load(
    job: ScoreJob, reference_sha: str, root: Path | None = None
) -> tuple[ScoreResult, Path] | None:
    """The cached pass and its log-probability file, read in place; None if absent or torn."""
    folder = (root or default_root()) / key(job, reference_sha)
    if not all((folder / f).is_file() for f in FILES):
        return None
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        nll, top1 = np.load(folder / "nll.npy"), np.load(folder / "top1.npy")
        if (folder / "logprobs.f32").stat().st_size != len(nll) * meta["vocab"] * 4:
            return None  # torn: computed again
    except (OSError, ValueError, KeyError):
        return None
    log.info("reference pass read from %s (computed by an earlier evaluation)", folder)
    # this evaluation spent nothing on the pass: its timings say so; its memory is the pass's
    timings = {k: 0.0 for k in meta["timings"]}
    result = ScoreResult(
        nll=nll, top1=top1, vocab=int(meta["vocab"]), generations=[], memory=meta["memory"],
        timings=timings,
    )  # fmt: skip
    return result, folder / "logprobs.f32"


def store(job: ScoreJob, reference_sha: str, result: ScoreResult, root: Path | None = None) -> Path:
    """Keep this pass for the next evaluations (replacing any other entry), its log-probability
    file moved in, not copied; where the file now lies (where it was, if it cannot be kept)."""
    if job.logprob_path is None:
        raise ValueError("a reference pass writes its log-probabilities: logprob_path is None")
    root = root or default_root()
    name = key(job, reference_sha)
    tmp = root / f".{name}.{os.getpid()}"
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        np.save(tmp / "nll.npy", result.nll)
        np.save(tmp / "top1.npy", result.top1)
        meta = {"vocab": result.vocab, "memory": result.memory, "timings": result.timings}
        (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        # a rename where both are on one file system, else a copy (then the original goes)
        shutil.move(job.logprob_path, tmp / "logprobs.f32")
        for old in root.iterdir():
            if old != tmp and not old.name.startswith("."):
                shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(root / name, ignore_errors=True)
        tmp.rename(root / name)
    except OSError as exc:  # a cache that cannot be written costs time, never the evaluation
        log.warning("reference pass not cached: %s", exc)
        if not job.logprob_path.exists() and (tmp / "logprobs.f32").is_file():
            shutil.move(tmp / "logprobs.f32", job.logprob_path)  # moved before the failure
        shutil.rmtree(tmp, ignore_errors=True)
        return job.logprob_path
    return root / name / "logprobs.f32"
