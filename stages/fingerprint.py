"""DVC stage `fingerprint`: write reports/env.json (machine, accelerator, library versions).

It runs on every `dvc repro` (about a second); when nothing changed its output is byte-identical
and no benchmark reruns.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.engines.registry import get_engine
from quantbench.errors import run_main
from quantbench.fingerprint import fingerprint
from quantbench.params import read_params, section
from quantbench.schemas import io as schema_io


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", type=Path, default=Path("reports/env.json"))
    args = parser.parse_args()
    vllm = section(read_params(args.params), "engines.vllm", get_engine("vllm").settings_model)
    schema_io.write(args.out, fingerprint(vllm.python))  # type: ignore[attr-defined]


if __name__ == "__main__":
    run_main(main)
