"""``quantbench gather``: experiments from several machines, one report.

    quantbench gather --remote origin              # pull every experiment on origin, then gather
    quantbench gather                               # the experiments this clone already has
    quantbench gather --exp slots4 --exp slots8     # only these
    quantbench gather --price L4=0.80 --price H100=2.50   # price the roofline's hardware too

Writes reports/gathered/{gathered.json,summary.md,index.html} (``--out``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from quantbench.gather.experiments import ExperimentFiles, GatherError, local_experiments, pull
from quantbench.gather.gathered import gather
from quantbench.gather.machines import read_run
from quantbench.gather.render import markdown, page


def _price(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write HARDWARE=PRICE, e.g. L4=0.80") from None


def add_gather_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--remote", help="a git remote (name or URL) to pull every experiment "
                        "from first (`dvc exp pull --all-commits`), outputs from the default "
                        "DVC remote")  # fmt: skip
    parser.add_argument("--exp", action="append", default=[],
                        help="an experiment to gather (repeatable; default: all)")  # fmt: skip
    parser.add_argument("--price", action="append", type=_price, default=[],
                        help="HARDWARE=PRICE per hour for the roofline's hardware no machine "
                        "measured (repeatable)")  # fmt: skip
    parser.add_argument("--repo", type=Path, default=Path("."), help="the project (default: .)")
    parser.add_argument("--out", type=Path, default=Path("reports/gathered"))


def run_gather(args: argparse.Namespace) -> int:
    root = args.repo.resolve()
    if args.remote:
        pull(root, args.remote)
    found = local_experiments(root)
    if args.exp:
        missing = sorted(set(args.exp) - {e.name for e in found})
        if missing:
            raise GatherError(f"no experiment named {', '.join(missing)} here; `dvc exp list "
                              "--all-commits` lists them (pull them with --remote)")  # fmt: skip
        found = [e for e in found if e.name in args.exp]
    if not found:
        raise GatherError("no experiments to gather: run some (`dvc exp run`), or pull them "
                          "from where they were pushed (`--remote origin`)")  # fmt: skip
    runs = [read_run(ExperimentFiles(root, e)) for e in found]
    gathered = gather(runs, dict(args.price))
    out = args.out if args.out.is_absolute() else root / args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "gathered.json").write_text(
        json.dumps(gathered.model_dump(mode="json"), indent=2, sort_keys=True) + "\n",
        encoding="utf-8",
    )
    (out / "summary.md").write_text(markdown(gathered), encoding="utf-8")
    (out / "index.html").write_text(page(gathered), encoding="utf-8")
    for w in gathered.workloads:
        print(f"{w.workload}: {w.verdict}")
    print(f"gathered {len(runs)} experiment(s) from {len(gathered.machines)} machine(s): "
          f"{out / 'summary.md'}, {out / 'index.html'}")  # fmt: skip
    return 0
