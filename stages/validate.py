"""DVC stage `validate`: check all of params.yaml and what it points to, before any other stage.

The first stage of the pipeline (`prepare` depends on its output): a bad value anywhere (a bench
setting, a workload file, a group size that does not fit the model) stops `dvc repro` here, in
seconds, not after an hour of quantizing. Its output, reports/validate.json, is the same whenever
the params are valid, so a valid change reruns this stage (a second) and nothing else because of
it; each later stage depends on the sections it reads, not on this file's content.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.errors import run_main
from quantbench.schemas import io as schema_io
from quantbench.validation import validate_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", type=Path, default=Path("reports/validate.json"))
    args = parser.parse_args()
    verdict = validate_all(args.params)
    schema_io.write(args.out, verdict)
    print(f"validate: {args.params} is valid ({', '.join(verdict.sections)})")


if __name__ == "__main__":
    run_main(main)
