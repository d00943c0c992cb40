"""The estimate against measurements it was not fitted on: more streams than the pair probe ran,
and full-length prompts and answers.

Not a test and not a stage. The default run's estimate check is mostly in-sample: each pair's
probe runs its server at 1 to 4 concurrent requests at the workloads' short lengths, and the
default loads are 1 and 4 streams of those same lengths. This script copies the project (with the
default run's outputs, so nothing before the workloads is computed again) into a scratch folder,
sets the chat workload to full length (`length_scale: 1.0`) at 1, 4, 8 and 16 streams for the
given pairs (one server setting each), runs `dvc repro report` there, and prints the report's
estimate check: every figure at 8 or 16 streams, or at full length, is out-of-sample.

    python benchmarks/estimate_out_of_sample.py gguf-q4_k_m-llamacpp w8a8-vllm

It needs `make repro` to have run (models/, reports/ and dvc.lock of the default run). The
out-of-sample table of docs/ESTIMATE.md was measured this way.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from quantbench.fsutil import copy_checkout

REPO = Path(__file__).resolve().parents[1]


def scratch_copy(dest: Path) -> None:
    copy_checkout(REPO, dest)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)  # DVC wants a repository
    # the default run's cache: an output DVC cannot find in its cache is computed again
    subprocess.run(
        [str(REPO / ".venv/bin/dvc"), "cache", "dir", "--local", str(REPO / ".dvc/cache")],
        cwd=dest, check=True,
    )  # fmt: skip
    for folder in ("models", "reports"):
        # tracked files under reports/ (its README) were copied above
        shutil.copytree(REPO / folder, dest / folder, symlinks=True, dirs_exist_ok=True)


def out_of_sample_params(params: dict, pairs: list[str], requests: int) -> dict:
    chat = params["workloads"]["chat"]
    chat.pop("precision", None)
    chat.update(
        length_scale=1.0,
        num_requests=requests,
        load=[{"kind": "concurrency", "concurrency": c} for c in (1, 4, 8, 16)],
    )
    params["workloads"] = {"chat": chat}
    kept = {}
    for name in pairs:
        pair = params["bench"]["pairs"][name]
        settings = dict(pair.get("settings") or {})
        sweep = settings.pop("sweep", None) or {}
        for key, values in sweep.items():  # the sweep's first value: the likely winner
            settings[key] = values[0]
        settings["sweep"] = {}
        kept[name] = {**pair, "settings": settings}
        kept[name].pop("fallback_for", None)  # the pair it stands in for may not be kept
    params["bench"]["pairs"] = kept
    params["report"]["confirm"]["enabled"] = False
    return params


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("pairs", nargs="+", help="bench pairs of params.yaml")
    parser.add_argument("--requests", type=int, default=16, help="measured requests per point")
    parser.add_argument("--keep", type=Path, default=None, help="run here and keep the folder")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="qb-oos-"))
    scratch_copy(root)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params = out_of_sample_params(params, args.pairs, args.requests)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    started = time.monotonic()
    done = subprocess.run(
        [str(REPO / ".venv/bin/python"), "-m", "dvc", "repro", "report"], cwd=root, check=False
    )
    print(f"\ndvc repro took {time.monotonic() - started:.0f} s in {root}")
    if done.returncode != 0:
        sys.exit(done.returncode)
    summary = (root / "reports/summary.md").read_text()
    start = summary.find("Estimate against measurement")
    end = summary.find("SLO edge", start)
    print(summary[start:end] if start >= 0 else "no estimate check in the summary")


if __name__ == "__main__":
    main()
