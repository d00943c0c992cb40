"""DVC stage `decide`: measure again, in alternation, what the screening of every bench stage's
rows could not settle (rows not yet separable from their workload's leader; tuned-against-default
gains), within report.confirm's budget, into reports/decide/ (quantbench.bench.decide;
docs/BENCH.md, "How the decision is made")."""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.bench.decide import OUT, decide_stage
from quantbench.config import load_config
from quantbench.errors import run_main
from quantbench.progress import setup_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--root", type=Path, default=Path("."), help="where reports/ and models/ are"
    )
    parser.add_argument("--out", type=Path, default=None, help=f"default: <root>/{OUT}")
    args = parser.parse_args()
    setup_logging()
    result = decide_stage(load_config(args.params), args.root, args.out)
    for duel in result.duels:
        print(
            f"decide [{duel.workload}] {duel.purpose}: {duel.a} against {duel.b}: "
            f"{duel.verdict or 'no verdict'} ({len(duel.rounds)} rounds; {duel.stopped})"
        )
    if not result.duels:
        print("decide: the screening left nothing to measure again")


if __name__ == "__main__":
    run_main(main)
