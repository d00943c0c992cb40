"""DVC stage `merge`: merge the adapter into the base, save models/merged, verify, report.

reports/merge.json is written whether or not verification passes; the stage fails (and DVC keeps
nothing) when a tolerance in params.yaml's `merge:` section is broken.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.data import DataSettings, check_data_file
from quantbench.errors import run_main
from quantbench.fsutil import atomic_dir
from quantbench.lora.merge import MergeVerificationError, merge_and_verify
from quantbench.lora.spec import MergeSettings
from quantbench.model import write_merged_info
from quantbench.params import read_params, section
from quantbench.progress import setup_logging
from quantbench.qa import load_qa
from quantbench.runtime import RuntimeSettings, configure_device, configure_threads
from quantbench.schemas import io as schema_io


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--base", type=Path, default=Path("models/base"))
    parser.add_argument("--adapter", type=Path, default=Path("models/adapter"))
    parser.add_argument("--out", type=Path, default=Path("models/merged"))
    parser.add_argument("--report", type=Path, default=Path("reports/merge.json"))
    args = parser.parse_args()
    setup_logging()
    params = read_params(args.params)
    merge = section(params, "merge", MergeSettings)
    data = section(params, "data", DataSettings)
    runtime = section(params, "runtime", RuntimeSettings)
    items = load_qa(check_data_file(data.heldout, "data.heldout"))[: merge.probe_limit]
    configure_threads(runtime.threads)
    device = configure_device(runtime.device)
    with atomic_dir(args.out) as tmp:
        try:
            report = merge_and_verify(args.base, args.adapter, items, merge, tmp, device=device)
        except MergeVerificationError as exc:
            schema_io.write(args.report, exc.report)
            raise
        write_merged_info(tmp, args.base, report.adapter, report.saved_dtype)
    schema_io.write(args.report, report)


if __name__ == "__main__":
    run_main(main)
