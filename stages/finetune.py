"""DVC stage `finetune`: train a LoRA adapter (or adopt the one params name) into models/adapter.

Writes reports/finetune.json with held-out accuracy before and after, so anyone can see whether the
adapter learned something.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.data import DataSettings, check_data_file
from quantbench.errors import run_main
from quantbench.fsutil import atomic_dir
from quantbench.lora.adopt import adopt_adapter
from quantbench.lora.spec import LoraSettings
from quantbench.lora.train import train_adapter
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.qa import load_qa
from quantbench.runtime import RuntimeSettings, configure_device, configure_threads
from quantbench.schemas import io as schema_io


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--base", type=Path, default=Path("models/base"))
    parser.add_argument("--out", type=Path, default=Path("models/adapter"))
    parser.add_argument("--report", type=Path, default=Path("reports/finetune.json"))
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    lora = section(params, "lora", LoraSettings)
    data = section(params, "data", DataSettings)
    runtime = section(params, "runtime", RuntimeSettings)
    heldout = load_qa(check_data_file(data.heldout, "data.heldout"))[: lora.heldout_limit]
    if lora.train:
        check_data_file(data.train, "data.train")
    configure_threads(runtime.threads)
    device = configure_device(runtime.device)
    with atomic_dir(args.out) as tmp:
        if lora.train:
            report = train_adapter(
                args.base, data.train, heldout, lora, runtime.seed, tmp, device=device
            )
        else:
            assert lora.adapter_path is not None  # enforced by the settings
            report = adopt_adapter(args.base, lora.adapter_path, heldout, lora, tmp, device=device)
    schema_io.write(args.report, report)


if __name__ == "__main__":
    run_main(main)
