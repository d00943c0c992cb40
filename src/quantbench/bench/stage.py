"""One pair run as the bench stage runs it: resolved from the validated params, keyed for
resuming, written whole or not at all.

``bench_stage`` is what ``stages/bench.py`` calls; :func:`run_pair_to` is the part every caller
that writes a pair's folder shares (the stage, the fault suite's stage stand-in): SIGTERM taken
as an interrupt so the servers are stopped, the folder built beside its target and renamed into
place only when complete, ``summary.json`` beside the records.
"""

from __future__ import annotations

import logging
from pathlib import Path

from quantbench.bench.configured import PipelineConfig
from quantbench.bench.job import JobPaths, pair_job
from quantbench.bench.resume import PartialStore, code_hash, fingerprint
from quantbench.bench.run import PairJob, run_pair
from quantbench.engines.server import sigterm_as_interrupt
from quantbench.fsutil import atomic_dir, sha256_file, sha256_tree
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import PairSummary

SUMMARY = "summary.json"
log = logging.getLogger(__name__)


def run_pair_to(job: PairJob, out: Path) -> PairSummary:
    """Run ``job`` into the folder ``out`` (atomically) with its ``summary.json``."""
    with sigterm_as_interrupt(), atomic_dir(out) as tmp:
        summary = run_pair(job, tmp)
        schema_io.write(tmp / SUMMARY, summary)
    return summary


def resume_key(job: PairJob, paths: JobPaths, env: Path) -> str:
    """What the pair's finished points were measured with: a point kept from an interrupted run
    is reused only when every part is the same (the variant's files, the traffic, the settings,
    the machine's environment, quantbench's own code)."""
    variant_dir = paths.variants / job.artifact.name
    task = job.task
    return fingerprint(
        {
            "engine": job.engine.name,
            "settings": job.settings.model_dump(mode="json"),
            "variant": sha256_tree(variant_dir) if variant_dir.is_dir() else None,
            "workloads": {n: w.model_dump(mode="json") for n, w in job.workloads.items()},
            "traffic": {n: sha256_file(paths.workloads / f"{n}.jsonl") for n in job.workloads},
            "slo": job.slo.text,
            "bench": job.bench.model_dump(mode="json", exclude={"pairs"}),
            "margins": job.margins.model_dump(mode="json"),
            "probe": None if job.probe is None else job.probe.model_dump(mode="json"),
            "env": sha256_file(env) if env.is_file() else None,
            "code": code_hash(),
            "task": None
            if task is None
            else {
                "items": [[i.question, i.answer, list(i.accept)] for i in task.items],
                "max_new_tokens": task.max_new_tokens,
                "settings": task.settings.model_dump(mode="json"),
            },
        }
    )


def bench_stage(
    pair: str, config: PipelineConfig, paths: JobPaths, env: Path, out: Path
) -> PairSummary:
    """The bench stage of ``pair``: its job from the config (served task and probe included),
    the finished points of an interrupted run with the same key kept, the run into ``out``."""
    job = pair_job(config, pair, paths, with_task=True, with_probe=True)
    store = PartialStore(pair, resume_key(job, paths, env))
    if kept := store.open():
        log.info("%s: resuming: %d points finished earlier are kept", pair, kept)
    job.store = store
    summary = run_pair_to(job, out)
    store.close()
    return summary
