"""DVC stage `finetune`: train a LoRA adapter (or adopt the one params name) into models/adapter.

Writes reports/finetune.json with held-out accuracy before and after, so anyone can see whether the
adapter learned something.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.config import load_config
from quantbench.errors import run_main
from quantbench.fsutil import atomic_dir, write_json
from quantbench.lora.adopt import adopt_adapter
from quantbench.lora.train import train_adapter
from quantbench.progress import setup_logging
from quantbench.qa import load_qa
from quantbench.runtime import configure_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--base", type=Path, default=Path("models/base"))
    parser.add_argument("--out", type=Path, default=Path("models/adapter"))
    parser.add_argument("--report", type=Path, default=Path("reports/finetune.json"))
    args = parser.parse_args()
    setup_logging()
    config = load_config(args.params)
    configure_threads(config.runtime.threads)
    heldout = load_qa(config.data.heldout)
    with atomic_dir(args.out) as tmp:
        if config.lora.train:
            report = train_adapter(
                args.base, config.data.train, heldout, config.lora, config.runtime.seed, tmp
            )
        else:
            assert config.lora.adapter_path is not None  # enforced by the config
            report = adopt_adapter(args.base, config.lora.adapter_path, heldout, config.lora, tmp)
    report["params"] = config.lora.model_dump(mode="json")
    write_json(args.report, report)


if __name__ == "__main__":
    run_main(main)
