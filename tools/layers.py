"""The layers of ``src/quantbench``: which package may import which, and a check that holds them.

A *unit* is a package of ``quantbench`` (``quantbench.load``) or a module at its top
(``quantbench.slo``). ``LAYERS`` orders every unit from the bottom (what everything builds
on) to the top (the command line): a unit may import only units below it, anywhere in its code
(an import inside a function is an import: moving one there to break a cycle hides the cycle,
it does not remove it). A total order has no cycle between units; the check also refuses a
cycle between modules at import time (the module bodies' imports, ``TYPE_CHECKING`` blocks
aside), inside a unit included.

``KNOWN`` lists the imports against the order that are still there, each with what removing it
takes: the check fails on any other, and on a listed one that is gone (so the list only
shrinks).

    python tools/layers.py            # the problems; exit 1 if any
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
# A package's command line (``quantbench/cli/load.py``: `quantbench load`) is an entry point:
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
            "checks",
            "settings",
            "strict",
            "textfile",
            "fsutil",
            "safetensors_header",
            "hfconfig",
            "machine_cache",
            "secrets",
            "ports",
            "progress",
            "accelerator",
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
        "intervals, sample sizes, SLOs, repeated looks",
        ["precision", "sequential", "slo"],
    ),
    (
        "schemas",
        "every file that crosses a stage, versioned; what produced it",
        ["schemas", "fingerprint"],
    ),
    (
        "model",
        "the model, its merge and its answers checked",
        ["model", "model_files", "linear_names", "fidelity"],
    ),
    (
        "variants",
        "the format contract and its quantizers, the variants' quality, the fine-tuning",
        ["formats", "quantize", "quality", "lora"],
    ),
    (
        "serving",
        "traffic, the load harness, the engine contract and its servers, the estimator",
        ["workloads", "load", "mock_server", "engines", "estimate"],
    ),
    (
        "decision",
        "other tools' runs, every stage output read back, the decision, the report that renders "
        "it, a pair's bench and the decide stage's measuring, params as one validated config",
        [
            "exchange",
            "outputs",
            "decision",
            "report",
            "bench",
            "config",
            "prepared_cache",
            "gather",
        ],
    ),
    (
        "entry points",
        "checks before any work, the engines' and formats' code stamps, the command line",
        ["preflight", "validation", "code_stamps", "cli"],
    ),
]


# Imports against the order still in the tree ("importer -> imported" modules), each with what
# removing it takes. Empty: none is left, and the check keeps it so.
KNOWN: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    """One import of a project module by another, where it is written."""

    module: str
    target: str
    where: str  # file:line, relative to src
    at_import_time: bool  # in the module's body (not in a function, nor under TYPE_CHECKING)

    @property
    def edge(self) -> str:
        return f"{self.module} -> {self.target}"


def order() -> list[str]:
    return [unit for _, _, units in LAYERS for unit in units]


def unit_of(module: str) -> str:
    """The unit a module belongs to: its package below ``quantbench``, or itself at the top."""
    parts = module.split(".")
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


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def body_imports(tree: ast.Module) -> set[int]:
    """Ids of the import nodes that run when the module is imported: its body's, in its ``if``
    and ``try`` blocks too, but not under ``if TYPE_CHECKING`` nor in a function or class."""
    found: set[int] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.add(id(node))
            elif isinstance(node, ast.If) and not is_type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody):
                    visit(block)
                for handler in node.handlers:
                    visit(handler.body)

    visit(tree.body)
    return found


def imported_names(node: ast.AST, current: str, is_pkg: bool) -> tuple[str | None, list[str]]:
    """What an import statement in module ``current`` names, absolute: for ``from M import a``,
    ``M`` (a relative one resolved) and ``[M.a]``; for ``import M``, None and ``[M]``; for any
    other node, None and nothing."""
    if isinstance(node, ast.Import):
        return None, [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = current.split(".") if is_pkg else current.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        return base, [f"{base}.{a.name}" for a in node.names]
    return None, []


def imports(src: Path = SRC) -> Iterable[Import]:
    """Every import of a project module in ``src``, at any depth of the code."""
    for path in sorted((src / PACKAGE).rglob("*.py")):
        current = _module_name(path, src)
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        at_import_time = body_imports(tree)
        for node in ast.walk(tree):
            _, names = imported_names(node, current, is_pkg)
            where = f"{path.relative_to(src)}:{getattr(node, 'lineno', 0)}"
            for target in sorted({_resolve(n, src) for n in names if _in_package(n)} - {None}):
                if target != current:
                    yield Import(current, target, where, id(node) in at_import_time)


def _in_package(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def import_time_cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(groups)


def check(src: Path = SRC, known: dict[str, str] | None = None) -> list[str]:
    """Every problem, as lines: an import against the order (not in ``known``), a unit in no
    layer, a cycle between modules at import time, an entry of ``known`` no longer needed."""
    known = KNOWN if known is None else known
    rank = {unit: i for i, unit in enumerate(order())}
    problems: list[str] = []
    units = {unit_of(_module_name(p, src)) for p in (src / PACKAGE).rglob("*.py")}
    for unit in sorted(units - set(rank)):
        problems.append(f"{unit}: in no layer (add it to LAYERS in tools/layers.py)")
    seen_known: set[str] = set()
    body_edges: set[tuple[str, str]] = set()
    for imp in imports(src):
        if imp.at_import_time:
            body_edges.add((imp.module, imp.target))
        a, b = unit_of(imp.module), unit_of(imp.target)
        if a == b or a not in rank or b not in rank or rank[b] < rank[a]:
            continue
        if imp.edge in known:
            seen_known.add(imp.edge)
            continue
        problems.append(
            f"{imp.where}: {imp.module} imports {imp.target}, but {b} is not below {a} "
            "(tools/layers.py LAYERS)"
        )
    for group in import_time_cycles(body_edges):
        problems.append(f"import cycle at import time: {' -> '.join(group)}")
    for edge in sorted(set(known) - seen_known):
        problems.append(f"{edge}: no longer imported; remove it from KNOWN in tools/layers.py")
    return problems


def draw() -> str:
    """The layers, top first, as a text figure for docs/ARCHITECTURE.md."""
    lines = []
    for name, what, units in reversed(LAYERS):
        lines.append(f"{name:>12} | {', '.join(units)}")
        lines.append(f"{'':>12} |   {what}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draw", action="store_true", help="print the layers, top first")
    parser.add_argument("--src", type=Path, default=SRC)
    args = parser.parse_args(argv)
    if args.draw:
        print(draw())
        return 0
    problems = check(args.src)
    for line in problems:
        print(line)
    if problems:
        print(f"\n{len(problems)} problem(s) with the layers of src/quantbench", file=sys.stderr)
        return 1
    print(f"src/quantbench: every import goes down the layers ({len(KNOWN)} known exceptions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
