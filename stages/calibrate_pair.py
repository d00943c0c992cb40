"""DVC stage `calibrate_pair@<pair>`: probe one bench pair's real server for the estimate.

Starts the pair's engine on its variant (the sweep's setting that batches most), sends a few
greedy fixed-length requests alone and together, stops it, and writes what its requests and
steps cost on this machine to reports/calibrate/pairs/<pair>.json. The `estimate` stage predicts
the pair's bench points from it. A server that does not start or serve is recorded in the file
(`error`, the server log kept in logs/calibrate/), and the estimate predicts that pair from the
roofline alone: one broken pair does not stop the pipeline. A pair with `probe: false`, or one
that starts no server on this machine (quantbench.bench.served_here), starts no server here
either: its file says so (`skipped`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.bench.served_here import not_served_here, unservable_in
from quantbench.bench.spec import BenchSettings
from quantbench.engines.artifact import load_artifact
from quantbench.engines.registry import check_pair, get_engine, pair_settings
from quantbench.engines.server import sigterm_as_interrupt
from quantbench.errors import UserError, run_main
from quantbench.estimate.pair_probe import calibrate_pair
from quantbench.estimate.spec import ProbeSettings
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.schemas import io as schema_io
from quantbench.schemas.machine import PairCalibration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pair", required=True, help="a key of bench.pairs")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--variants", type=Path, default=Path("models/variants"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--logs", type=Path, default=Path("logs/calibrate"))
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    bench = section(params, "bench", BenchSettings)
    if args.pair not in bench.pairs:
        raise UserError(
            f"--pair {args.pair!r} is not in bench.pairs; known: {', '.join(bench.pairs)}"
        )
    pair = bench.pairs[args.pair]
    variants = params.get("variants") or {}
    check_pair(pair.variant, str((variants.get(pair.variant) or {}).get("format", "")), pair.engine)
    engine = get_engine(pair.engine)
    settings = pair_settings(params, args.pair, pair, args.params)
    artifact = load_artifact(args.variants / pair.variant, name=pair.variant)
    args.logs.mkdir(parents=True, exist_ok=True)
    skip = not_served_here(bench.pairs, unservable_in(params, args.params)).get(args.pair)
    if skip is None and not pair.probe:
        skip = f"bench.pairs.{args.pair}.probe is false"
    with sigterm_as_interrupt():
        calibration = calibrate_pair(
            args.pair, pair.variant, engine, artifact, settings, bench.host, args.logs,
            section(params, "estimate.probe", ProbeSettings), skip=skip,
        )  # fmt: skip
    out = args.out or Path(PairCalibration.OUTPUT.format(pair=args.pair))
    schema_io.write(out, calibration)
    outcome = (
        calibration.fit.describe()
        if calibration.fit
        else f"not probed: {calibration.skipped}"
        if calibration.skipped
        else f"failed: {calibration.error}"
    )
    print(
        f"calibrate_pair {args.pair} ({calibration.server_point}, {calibration.seconds:.0f} s): "
        f"{outcome}"
    )


if __name__ == "__main__":
    run_main(main)
