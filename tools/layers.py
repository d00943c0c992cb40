"""The layers of ``src/quantbench``: which package may import which, and a check that holds them.

A *unit* is a package of ``quantbench`` (``quantbench.load``) or a module at its top
(``quantbench.slo``). ``LAYERS`` orders every unit from the bottom (what everything builds on)
to the top (the command line): a unit may import only units below it, anywhere in its code
(an import inside a function is an import: moving one there to break a cycle hides the cycle,
it does not remove it). A total order has no cycle, at import time or later.

    python tools/layers.py            # the violations and the units in no layer; exit 1 if any
    python tools/layers.py --draw     # the layers as docs/ARCHITECTURE.md draws them

``tools/dag.py --check`` (``make check-dag``, run by ``make test``) runs this check too.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "quantbench"
ROOT = "quantbench"  # the package's own __init__ (its version)
# A package's command line (``quantbench/load/cli.py``: `quantbench load`) is an entry point:
# it counts as the top unit, whichever package holds it
ENTRY_MODULE = "cli"
ENTRY_UNIT = "cli"

# Bottom to top; within a layer, too, a unit may import only those listed before it.
LAYERS: list[tuple[str, str, list[str]]] = [
    (
        "foundation",
        "errors, settings, files, the machine: no knowledge of models or serving",
        [
            "quantbench",
            "errors",
            "settings",
            "strict",
            "textfile",
            "fsutil",
            "hfconfig",
            "machine_cache",
            "secrets",
            "ports",
            "progress",
            "runtime",
            "params",
            "native",
            "chat",
            "qa",
            "data",
        ],
    ),
    (
        "statistics",
        "intervals, sample sizes, SLOs",
        ["precision", "slo"],
    ),
    (
        "schemas",
        "every file that crosses a stage, versioned; what produced it",
        ["schemas", "fingerprint"],
    ),
    (
        "model",
        "the model, its merge and its answers checked",
        ["model", "linear_names", "fidelity"],
    ),
    (
        "formats",
        "the format contract and its quantizers, the variant checked against its source",
        ["formats", "quantize", "quality", "lora"],
    ),
    (
        "serving",
        "traffic, the load harness, the engine contract and its servers, the estimator",
        ["workloads", "load", "mock_server", "engines", "estimate"],
    ),
    (
        "decision",
        "a pair's bench, the decision, the report",
        ["decision", "bench", "exchange", "report", "config", "prepared_cache", "gather"],
    ),
    (
        "entry points",
        "checks before any work, the command line",
        ["preflight", "validation", "cli"],
    ),
]


@dataclass(frozen=True)
class Import:
    """One import of a project module by another, where it is written."""

    module: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(self.path.parents[2])}:{self.line}: {self.module} imports {self.target}"


def order() -> list[str]:
    return [unit for _, _, units in LAYERS for unit in units]


def unit_of(module: str) -> str:
    """The unit a module belongs to: its package below ``quantbench``, or ``cli`` for a
    package's command line (a module named ``cli``: an entry point, which may import any layer,
    and which nothing but the command line imports)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[-1] == ENTRY_MODULE:
        return ENTRY_UNIT
    return ROOT if len(parts) == 1 else parts[1]


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(name: str, src: Path) -> str | None:
    """The deepest module of the project that ``name`` (a module or a name in one) denotes."""
    parts = name.split(".")
    while parts:
        base = src / Path(*parts)
        if (base / "__init__.py").is_file() or base.with_suffix(".py").is_file():
            return ".".join(parts)
        parts.pop()
    return None


def imports(src: Path = SRC) -> Iterable[Import]:
    """Every import of a project module in ``src``, at any depth of the code."""
    for path in sorted((src / PACKAGE).rglob("*.py")):
        current = _module_name(path, src)
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = current.split(".") if is_pkg else current.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                names = [f"{base}.{a.name}" for a in node.names]
            for name in names:
                if name == PACKAGE or name.startswith(PACKAGE + "."):
                    target = _resolve(name, src)
                    if target and target != current:
                        yield Import(current, target, path, node.lineno)


def violations(src: Path = SRC) -> list[str]:
    """An import of a unit not below the importer's, and a unit in no layer, as lines."""
    rank = {unit: i for i, unit in enumerate(order())}
    problems: list[str] = []
    units = {unit_of(_module_name(p, src)) for p in (src / PACKAGE).rglob("*.py")}
    for unit in sorted(units - set(rank)):
        problems.append(f"{unit}: in no layer (add it to LAYERS in tools/layers.py)")
    for imp in imports(src):
        a, b = unit_of(imp.module), unit_of(imp.target)
        if a == b or a not in rank or b not in rank:
            continue
        if rank[b] > rank[a]:
            problems.append(f"{imp} (layer order: {b} is above {a})")
    return problems


def draw() -> str:
    """The layers, top first, as a text figure for docs/ARCHITECTURE.md."""
    lines = []
    for name, what, units in reversed(LAYERS):
        lines.append(f"{name:>13} | {', '.join(units)}")
        lines.append(f"{'':>13} |   ({what})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draw", action="store_true", help="print the layers, top first")
    parser.add_argument("--src", type=Path, default=SRC)
    args = parser.parse_args(argv)
    if args.draw:
        print(draw())
        return 0
    problems = violations(args.src)
    for line in problems:
        print(line)
    if problems:
        print(f"\n{len(problems)} import(s) against the layers", file=sys.stderr)
        return 1
    print("src/quantbench: every import goes down the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
