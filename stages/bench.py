"""DVC stage `bench@<variant>-<engine>`: benchmark one variant on one engine into reports/bench/.

Starts the engine once per server-setting point of its sweep, runs every load point (or the
SLO-edge search) against it, stops it, and writes the records, a summary per point, the server's
log and memory, and the best configuration under the SLOs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.bench.run import PairJob, run_pair
from quantbench.bench.spec import BenchSettings
from quantbench.engines.artifact import load_artifact
from quantbench.engines.registry import check_pair, get_engine
from quantbench.engines.server import sigterm_as_interrupt
from quantbench.errors import UserError, run_main
from quantbench.formats.registry import variant_recipe
from quantbench.fsutil import atomic_dir
from quantbench.load.spec import WorkloadSpec
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.schemas import io as schema_io
from quantbench.slo import slo_section


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
    params = read_params(args.params)
    bench = section(params, "bench", BenchSettings)
    if args.pair not in bench.pairs:
        raise UserError(
            f"--pair {args.pair!r} is not in bench.pairs; known: {', '.join(bench.pairs)}"
        )
    pair = bench.pairs[args.pair]
    engine = get_engine(pair.engine)
    check_pair(pair.variant, variant_recipe(params, pair.variant, args.params).format, pair.engine)
    job = PairJob(
        name=args.pair,
        artifact=load_artifact(args.variants / pair.variant, name=pair.variant),
        engine=engine,
        settings=section(params, f"engines.{pair.engine}", engine.settings_model),
        workload=section(params, "workload", WorkloadSpec),
        slo=slo_section(params),
        bench=bench,
    )
    out = args.out or Path("reports/bench") / args.pair
    with sigterm_as_interrupt(), atomic_dir(out) as tmp:
        summary = run_pair(job, tmp)
        schema_io.write(tmp / "summary.json", summary)
    best = summary.best
    print(f"{args.pair}: best {best.server_point} / {best.load_point}" if best else
          f"{args.pair}: no configuration met the SLOs")  # fmt: skip


if __name__ == "__main__":
    run_main(main)
