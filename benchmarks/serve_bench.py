"""One variant on one engine, by hand: `quantbench serve`, then `quantbench load`, then stop.

Not a test and not a stage. Starts the variant with the project's own launcher (`quantbench serve`,
engine settings from params.yaml), reads the URL it prints once its warm-up request is answered
(the time until then is printed as the start time), runs `quantbench load` against it with the
flags given after `--`, and stops the server with SIGTERM (the launcher's clean teardown).

    python benchmarks/serve_bench.py w8a8 vllm -- --random-input-len 64 --random-output-len 32 \\
        --concurrency 1 --num-requests 8 --fixed-output-length

The table of docs/QUANTIZE.md ("int8 W8A8") was measured this way.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

READY = re.compile(r"is serving .* at (http://\S+)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", help="a variant name (models/variants/<name>)")
    parser.add_argument("engine")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="after --: bench flags")
    args = parser.parse_args(argv)
    extra = [a for a in args.bench_args if a != "--"]
    folder = (Path("models/variants") / args.variant).resolve()
    cli = [sys.executable, "-m", "quantbench.cli"]
    started = time.perf_counter()
    serve = subprocess.Popen(
        [*cli, "serve", args.variant, "--engine", args.engine, "--params", args.params],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url = None
        assert serve.stdout is not None
        for line in serve.stdout:
            found = READY.search(line)
            if found:
                url = found.group(1)
                break
        if url is None:
            print(f"{args.variant} on {args.engine} did not start (exit {serve.wait()})")
            return 1
        print(
            f"{args.variant} on {args.engine}: answering after {time.perf_counter() - started:.1f} s"
        )
        bench = [*cli, "load", "--url", url, "--engine", args.engine, "--tokenizer", str(folder)]
        if args.engine == "transformers":  # its /v1/models is empty; the model is the path
            bench += ["--model", str(folder)]
        return subprocess.run([*bench, *extra], check=False).returncode
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
