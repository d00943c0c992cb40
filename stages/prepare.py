"""DVC stage `prepare`: resolve the base model and write it to models/base with model_info.json."""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.errors import run_main
from quantbench.fsutil import atomic_dir
from quantbench.model import ModelSettings, check_model_source, prepare_base
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.runtime import RuntimeSettings, configure_device, configure_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", type=Path, default=Path("models/base"))
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    model = section(params, "model", ModelSettings)
    runtime = section(params, "runtime", RuntimeSettings)
    check_model_source(model)
    configure_threads(runtime.threads)
    # nothing here computes (the base is read and written as it is): resolving the device
    # refuses runtime.device: cuda without a GPU at the first stage, not the fine-tune's
    configure_device(runtime.device)
    with atomic_dir(args.out) as tmp:
        prepare_base(model, tmp)


if __name__ == "__main__":
    run_main(main)
