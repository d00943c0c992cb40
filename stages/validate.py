"""DVC stage `validate`: check all of params.yaml and what it points to, before any other stage.

The first stage of the pipeline (`prepare` depends on its output): a bad value anywhere (a bench
setting, a workload file, a group size that does not fit the model) stops `dvc repro` here, in
seconds, not after an hour of quantizing. Its output, reports/validate.json, is the same whenever
the params are valid, so a valid change reruns this stage (a second) and nothing else because of
it; each later stage depends on the sections it reads, not on this file's content.

It also stamps the code of every registered engine and format, plugins included
(reports/code/<kind>/<name>.json, quantbench.code_stamps): the stages keyed by one format or
engine depend on its stamp, which changes only when that one's module does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.code_stamps import write_code_stamps
from quantbench.errors import run_main
from quantbench.schemas import io as schema_io
from quantbench.validation import validate_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", type=Path, default=Path("reports/validate.json"))
    parser.add_argument("--code", type=Path, default=Path("reports/code"))
    args = parser.parse_args()
    verdict = validate_all(args.params)
    stamps = write_code_stamps(args.code, project=Path(args.params).resolve().parent)
    schema_io.write(args.out, verdict)
    print(f"validate: {args.params} is valid ({', '.join(verdict.sections)}); "
          f"{len(stamps)} engine and format code stamps in {args.code}")  # fmt: skip


if __name__ == "__main__":
    run_main(main)
