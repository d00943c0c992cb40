"""DVC stage `fingerprint`: write reports/env.json (machine, accelerator, library versions).

It runs on every `dvc repro` (about a second); when nothing changed its output is byte-identical
and no benchmark reruns. Each enabled engine with an environment of its own (vLLM's venv, a
plugin's) has its packages' versions recorded there; each engine reports which native kernels
its server picks here (``Engine.kernels``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.engines.registry import engine_environments, engine_kernels
from quantbench.errors import run_main
from quantbench.fingerprint import fingerprint
from quantbench.params import read_params, section
from quantbench.runtime import RuntimeSettings
from quantbench.schemas import io as schema_io


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", type=Path, default=Path("reports/env.json"))
    args = parser.parse_args()
    params = read_params(args.params)
    environments = engine_environments(params)
    device = section(params, "runtime", RuntimeSettings).device
    schema_io.write(
        args.out,
        fingerprint(
            {name: (env.python, env.packages) for name, env in environments.items()},
            engine_kernels(params),
            device,
        ),
    )


if __name__ == "__main__":
    run_main(main)
