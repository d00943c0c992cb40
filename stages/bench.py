"""DVC stage `bench@<variant>-<engine>`: benchmark one variant on one engine into reports/bench/.

Starts the engine once per server-setting point of its sweep, checks its answers against the
variant's offline reference, runs every workload's load points (or the SLO-edge search) against
it, stops it, and writes the records, a summary per point, the server's log and memory, and the
best configuration per workload. On the setting that batches most it first probes the server for
the estimate (probe.json; `estimate.probe`, off with the pair's `probe: false`). Finished points are kept in .quantbench/partial/ until the stage
completes, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.bench.job import JobPaths, pair_job
from quantbench.bench.resume import PartialStore, code_hash, fingerprint
from quantbench.bench.run import run_pair
from quantbench.engines.server import sigterm_as_interrupt
from quantbench.errors import run_main
from quantbench.fsutil import atomic_dir, sha256_file, sha256_tree
from quantbench.params import read_params
from quantbench.progress import setup_logging
from quantbench.schemas import io as schema_io


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--pair", required=True, help="a key of bench.pairs, e.g. bf16-transformers"
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--variants", type=Path, default=Path("models/variants"))
    parser.add_argument("--workloads", type=Path, default=Path("reports/workloads"))
    parser.add_argument("--quality", type=Path, default=Path("reports/quality"))
    parser.add_argument("--env", type=Path, default=Path("reports/env.json"))
    parser.add_argument("--out", type=Path, default=None, help="default: reports/bench/<pair>")
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    paths = JobPaths(args.params, args.variants, args.workloads, args.quality)
    job = pair_job(params, args.pair, paths, with_task=True, with_probe=True)
    variant_dir = args.variants / job.artifact.name
    key = fingerprint(
        {
            "engine": job.engine.name,
            "settings": job.settings.model_dump(mode="json"),
            "variant": sha256_tree(variant_dir) if variant_dir.is_dir() else None,
            "workloads": {n: w.model_dump(mode="json") for n, w in job.workloads.items()},
            "traffic": {n: sha256_file(args.workloads / f"{n}.jsonl") for n in job.workloads},
            "slo": job.slo,
            "bench": job.bench.model_dump(mode="json", exclude={"pairs"}),
            "probe": None if job.probe is None else job.probe.model_dump(mode="json"),
            "env": sha256_file(args.env) if args.env.is_file() else None,
            "code": code_hash(),
            "task": None
            if job.task is None
            else {
                "items": [[i.question, i.answer, list(i.accept)] for i in job.task.items],
                "max_new_tokens": job.task.max_new_tokens,
                "settings": job.task.settings.model_dump(mode="json"),
            },
        }
    )
    store = PartialStore(args.pair, key)
    before = store.open()
    if before:
        print(f"{args.pair}: resuming: {before} points finished earlier are kept")
    job.store = store
    out = args.out or Path("reports/bench") / args.pair
    with sigterm_as_interrupt(), atomic_dir(out) as tmp:
        summary = run_pair(job, tmp)
        schema_io.write(tmp / "summary.json", summary)
    store.close()
    if summary.not_served:
        print(f"{args.pair}: no server started: {summary.not_served}")
        return
    for workload, best in summary.best.items():
        print(
            f"{args.pair} [{workload}]: best {best.server_point} / {best.load_point} "
            f"({summary.decided_by.get(workload, '')})"
            if best
            else f"{args.pair} [{workload}]: no configuration met the SLO and every check"
        )


if __name__ == "__main__":
    run_main(main)
