"""DVC stage `bench@<variant>-<engine>`: benchmark one variant on one engine into reports/bench/.

Starts the engine once per server-setting point of its sweep, runs every load point (or the
SLO-edge search) against it, stops it, and writes the records, a summary per point, the server's
log and memory, and the best configuration under the SLOs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.bench.run import PairJob, run_pair
from quantbench.config import load_config
from quantbench.engines.artifact import load_artifact
from quantbench.engines.registry import get_engine
from quantbench.engines.server import sigterm_as_interrupt
from quantbench.errors import UserError, run_main
from quantbench.fsutil import atomic_dir, write_json
from quantbench.progress import setup_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--pair", required=True, help="a key of bench.pairs, e.g. bf16-transformers"
    )
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--variants", type=Path, default=Path("models/variants"))
    parser.add_argument("--out", type=Path, default=None, help="default: reports/bench/<pair>")
    args = parser.parse_args()
    setup_logging()
    config = load_config(args.params)
    if args.pair not in config.bench.pairs:
        raise UserError(
            f"--pair {args.pair!r} is not in bench.pairs; known: {', '.join(config.bench.pairs)}"
        )
    pair = config.bench.pairs[args.pair]
    job = PairJob(
        name=args.pair,
        artifact=load_artifact(args.variants / pair.variant, name=pair.variant),
        engine=get_engine(pair.engine),
        settings=getattr(config.engines, pair.engine),
        workload=config.workload,
        slo=config.slo,
        bench=config.bench,
    )
    out = args.out or Path("reports/bench") / args.pair
    with sigterm_as_interrupt(), atomic_dir(out) as tmp:
        summary = run_pair(job, tmp)
        write_json(tmp / "summary.json", summary)
    best = summary["best"]
    print(f"{args.pair}: best {best['server_point']} / {best['load_point']}" if best else
          f"{args.pair}: no configuration met the SLOs")  # fmt: skip


if __name__ == "__main__":
    run_main(main)
