"""DVC stage `prepare`: resolve the base model and write it to models/base with model_info.json."""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench import preflight
from quantbench.config import load_config
from quantbench.errors import run_main
from quantbench.fsutil import atomic_dir
from quantbench.model import prepare_base
from quantbench.progress import setup_logging
from quantbench.runtime import configure_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", type=Path, default=Path("models/base"))
    args = parser.parse_args()
    setup_logging()
    config = load_config(args.params)
    preflight.check(config)  # the first stage: stop here, not hours later
    configure_threads(config.runtime.threads)
    with atomic_dir(args.out) as tmp:
        prepare_base(config.model, tmp)


if __name__ == "__main__":
    run_main(main)
