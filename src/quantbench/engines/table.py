"""The engine tables of README.md and docs/ENGINES.md, generated from the registry.

    python -m quantbench.engines.table           # docs/ENGINES.md's table
    python -m quantbench.engines.table --short   # README.md's

A test holds both documents equal to this output, so a new engine (or a changed one) is in the
docs as soon as it is registered: nothing names the engines by hand there.
"""

from __future__ import annotations

import argparse

from quantbench.engines.registry import BUILTIN, get_engine
from quantbench.formats.registry import format_names


def _serves(name: str) -> str:
    engine = get_engine(name)
    order = ["bf16", *(f for f in format_names() if f != "bf16")]  # the baseline first
    return ", ".join(f for f in order if engine.serves(f))


def _environment(name: str) -> str:
    engine = get_engine(name)
    env = engine.environment(engine.settings_model())
    if env is None:
        return "quantbench's"
    return f"its own (`{env.setting}`; `{env.create_command(name)}`)"


def markdown_table(short: bool = False, engines: list[str] | None = None) -> str:
    """One row per built-in engine (or per name in ``engines``)."""
    names = engines or list(BUILTIN)
    if short:
        lines = ["| engine | serves | server |", "|---|---|---|"]
        for name in names:
            lines.append(f"| `{name}` | {_serves(name)} | {get_engine(name).server} |")
        return "\n".join(lines)
    lines = [
        "| engine | serves | server | environment | readiness | metrics |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        engine = get_engine(name)
        metrics = f"`{engine.metrics_path}`" if engine.metrics_path else "—"
        lines.append(
            f"| `{name}` | {_serves(name)} | {engine.server} | {_environment(name)} | "
            f"`{engine.ready_path}` | {metrics} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="README.md's three columns")
    print(markdown_table(parser.parse_args().short))


if __name__ == "__main__":
    main()
