"""One model's pass over the evaluation, in a fresh process so its peak memory is its own.

The child loads the model, runs every window and answers the held-out prompts greedily, and
reports its resident-set peak. The reference's child writes the log-probabilities of the scored
positions to a float32 file (rows x vocab, streamed: the file is not held in memory); a
variant's child reads that file block by block as it goes and keeps only each token's KL
divergence from it, so a variant's rows are never written (writing, copying and re-reading
1.9 GB files were 20-40 s of each evaluate stage on the default run's text).
"""

from __future__ import annotations

import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import quantbench
from quantbench.accelerator.nvidia import Device
from quantbench.params import import_plugins
from quantbench.progress import quiet_bars_in_logs
from quantbench.quality.backends import get_backend
from quantbench.quality.metrics import ReferenceRows, kl_rows, log_softmax, token_stats
from quantbench.quality.windows import Window
from quantbench.runtime import configure_threads

# Logit rows turned into log-probabilities at a time: full-window float64 temporaries would
# dwarf a small model in the peak-memory figure.
ROWS_PER_CHUNK = 32
# Rows compared with the reference at a time: float64 temporaries of 8 rows are 3 MB.
KL_ROWS = 8


@dataclass(frozen=True)
class Reference:
    """The reference pass a variant's is compared with: its log-prob file and vocabulary."""

    path: Path
    vocab: int


@dataclass(frozen=True)
class ScoreJob:
    """Everything a child needs: picklable, no model objects."""

    backend: str  # a registered quality backend (quantbench.quality.backends): hf, gguf, ...
    path: Path  # model folder (hf) or .gguf file
    fmt: str
    compute_dtype: str
    threads: int
    n_ctx: int
    ids: list[int]
    windows: list[Window]
    logprob_path: Path | None
    """Where to write the scored rows' log-probabilities (the reference's pass); None: none."""
    prompts: list[list[int]]
    max_new_tokens: int
    stop_ids: frozenset[int]
    plugins: tuple[str, ...] = ()
    """The parent's plugins (quantbench.params.loaded_plugins): a plugin format's checkpoint is
    loaded by its own ``load_hf_model``, which the child knows only once it imports them."""
    device: Device = "cpu"
    """Where the backend computes (runtime.device, resolved by the stage)."""
    reference: Reference | None = None
    """Compare each scored row with this pass's (a variant's job): the result's ``kl``."""


@dataclass
class ScoreResult:
    nll: np.ndarray
    top1: np.ndarray
    vocab: int
    generations: list[list[int]]
    memory: dict[str, int]
    margins: list[list[float]] = field(default_factory=list)
    """Per generation, the logit margin each greedy token won by."""
    timings: dict[str, float] = field(default_factory=dict)
    kl: np.ndarray | None = None
    """KL(reference || this model) per scored token, where the job named a reference whose
    vocabulary is this model's (None otherwise: the parent says why)."""


def _peak_rss_bytes() -> int:
    """High-water mark of this process's resident memory.

    Read from /proc (VmHWM, per address space) rather than getrusage's ru_maxrss: Linux carries
    ru_maxrss across exec, so a child started from a big parent would report the parent's size.
    """
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # kB on Linux


def _current_rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize()


def run_job(job: ScoreJob) -> ScoreResult:
    """Score one model (runs inside the child process)."""
    kind = get_backend(job.backend)
    if kind.torch_threads:
        configure_threads(job.threads)
    timings: dict[str, float] = {}
    memory = {"before_load_rss_bytes": _current_rss_bytes()}
    start = time.perf_counter()
    # a backend that computes on the device is told which; one that does not is loaded as before
    where = {"device": job.device} if kind.on_device else {}
    backend = kind.load(job.path, job.fmt, job.compute_dtype, job.n_ctx, job.threads, **where)
    timings["load_s"] = round(time.perf_counter() - start, 3)
    memory["after_load_rss_bytes"] = _current_rss_bytes()

    ids = np.asarray(job.ids, dtype=np.int64)
    nll: list[np.ndarray] = []
    top1: list[np.ndarray] = []
    kl: list[np.ndarray] = []
    reference = ReferenceRows(job.reference.path, job.reference.vocab) if job.reference else None
    vocab = 0
    start = time.perf_counter()
    with open(job.logprob_path, "wb") if job.logprob_path else nullcontext() as sink:
        for window in job.windows:
            logits = backend.logits(job.ids[window.start : window.end])[window.logit_rows]
            targets = ids[window.first_target : window.end]
            for lo in range(0, len(targets), ROWS_PER_CHUNK):
                hi = min(len(targets), lo + ROWS_PER_CHUNK)
                logprobs = log_softmax(logits[lo:hi])
                vocab = logprobs.shape[1]
                stats = token_stats(logprobs, targets[lo:hi])
                nll.append(stats.nll)
                top1.append(stats.top1)
                if sink is not None:
                    sink.write(logprobs.tobytes())
                if reference is not None and vocab != reference.vocab:
                    reference.close()  # no KL: the parent refuses the pair, naming both
                    reference = None
                if reference is not None:
                    ref_rows = reference.take(hi - lo)
                    for k in range(0, hi - lo, KL_ROWS):
                        kl.append(kl_rows(ref_rows[k : k + KL_ROWS], logprobs[k : k + KL_ROWS]))
    if reference is not None:
        reference.close()
        if reference.left:
            raise ValueError(
                f"{reference.path}: {reference.left} rows of the reference left unread (the two "
                "passes scored different windows)"
            )
    timings["score_s"] = round(time.perf_counter() - start, 3)

    memory["after_score_peak_rss_bytes"] = _peak_rss_bytes()
    start = time.perf_counter()
    stop = set(job.stop_ids)
    scored = []
    for lo in range(0, len(job.prompts), kind.answer_batch):
        batch = job.prompts[lo : lo + kind.answer_batch]
        scored += backend.generate_scored_batch(batch, job.max_new_tokens, stop)
    generations = [tokens for tokens, _ in scored]
    timings["heldout_s"] = round(time.perf_counter() - start, 3)
    memory["peak_rss_bytes"] = _peak_rss_bytes()
    return ScoreResult(
        # a job of questions alone (quantbench.quality.evaluate._one_pass) scores no rows
        nll=np.concatenate(nll) if nll else np.empty(0),
        top1=np.concatenate(top1) if top1 else np.empty(0, dtype=np.int64),
        vocab=vocab,
        generations=generations,
        memory=memory,
        timings=timings,
        margins=[margins for _, margins in scored],
        kl=np.concatenate(kl) if kl else None,
    )


def run_isolated(job: ScoreJob) -> ScoreResult:
    """Run `run_job` in a fresh interpreter (clean memory accounting, no shared state).

    A plain subprocess rather than multiprocessing's spawn, which would re-import the caller's
    __main__ (a stage script or a test runner) in the child.
    """
    package_root = str(Path(quantbench.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="quantbench-job-") as tmp:
        job_file, result_file = Path(tmp) / "job.pkl", Path(tmp) / "result.pkl"
        job_file.write_bytes(pickle.dumps(job))
        # -c rather than -m: classes must unpickle as quantbench.quality.worker.*, not __main__.*
        entry = (
            "import sys; from quantbench.quality.worker import main; sys.exit(main(sys.argv[1:]))"
        )
        cmd = [sys.executable, "-c", entry, str(job_file), str(result_file)]
        status = subprocess.run(cmd, env=env).returncode
        if status != 0 or not result_file.is_file():
            raise RuntimeError(
                f"evaluating {job.path} ({job.backend}) failed in its worker process "
                f"(exit {status}); its error is printed above"
            )
        result: ScoreResult = pickle.loads(result_file.read_bytes())
    return result


def main(argv: list[str]) -> int:
    """Child entry point: read a pickled ScoreJob, write a pickled ScoreResult."""
    job_file, result_file = Path(argv[0]), Path(argv[1])
    # the stage's output policy holds in this process too: where stderr is a log, no bars and
    # GPTQModel's loader at warnings (its INFO lines were 40 of an evaluate stage's 50)
    quiet_bars_in_logs()
    job: ScoreJob = pickle.loads(job_file.read_bytes())
    import_plugins(list(job.plugins))
    result = run_job(job)
    result_file.write_bytes(pickle.dumps(result))
    return 0
