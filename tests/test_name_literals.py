"""No engine or format name as a string literal outside its own module and the registries.

What an engine or a format is lives in its module (``engines/<name>.py``, ``formats/<name>.py``)
and is found through its registry: code elsewhere that compares a format with ``"gguf"`` or
an engine with ``"vllm"`` is a branch a new format or engine cannot reach without editing it.
So the names of the built-in engines and formats (read from the registries) may stand as string
literals only

* in their own module, and in the registries (``engines/registry.py``, ``formats/registry.py``,
  and the weight layouts' registry and declaration: a layout bears the name of the format it
  was made for);
* as a format's name in ``engines/``: an engine declares the formats it serves (``formats``),
  and how it serves each;
* as a distribution's name (``transformers``, ``gguf``, ``vllm`` are also packages on PyPI): in
  a ``libraries``/``packages`` declaration, or asked for its version;
* in a docstring or a ``Literal[...]`` type;
* where :data:`ALLOWED` says why, each entry one that is still there (the list only shrinks).
"""

from __future__ import annotations

import ast
from pathlib import Path

from quantbench.engines.registry import BUILTIN as BUILTIN_ENGINES
from quantbench.formats.registry import BUILTIN as BUILTIN_FORMATS

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "quantbench"

# bf16 is also the dtype's name (compute dtypes, KV caches, GEMM tables, torch's bfloat16): as
# a literal it names the dtype far more often than the unquantized format
FORMATS = set(BUILTIN_FORMATS) - {"bf16"}
ENGINES = set(BUILTIN_ENGINES)

REGISTRIES = {
    "engines/registry.py",
    "formats/registry.py",
    "estimate/formats.py",  # the estimator's registry of weight layouts (register_layout)
    "schemas/estimate_inputs.py",  # the layouts' declaration, which a stored estimate reads by
}

# (module, literal) -> why it stays
ALLOWED: dict[tuple[str, str], str] = {
    ("cli/exchange.py", "vllm"): "an export target: `vllm bench serve`'s result file, not the "
    "engine",
    ("native/stack.py", "vllm"): "the software stack `make setup` installs: vLLM's own "
    "requirement files beside the project's",
    ("quality/backends.py", "gguf"): "the quality harness's registry of backends: its backend of "
    "llama.cpp files is named as the format that names it (Format.quality_backend)",
    ("schemas/env.py", "vllm"): "the migration of version-1 env.json files, whose vllm_env "
    "became engine_envs.vllm: a fact about old files",
    ("preflight.py", "gguf"): "the memory check of variants not built yet: the embedded model's "
    "GGUF file stands in for a GGUF variant's own",
    ("preflight.py", "w8a8"): "the memory check of variants not built yet: the least bits a "
    "weight takes, for a recipe without a bits field (W8A8's weights are int8)",
}

_DISTRIBUTION_TARGETS = ("librar", "packages")
_VERSION_CALLS = {"version", "pin"}


def _name_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _skipped(tree: ast.AST) -> set[int]:
    """ids of the constants that are docstrings, Literal[...] arguments or distribution names."""
    out: set[int] = set()

    def strings(node: ast.AST) -> None:
        out.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Constant))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            out.add(id(body[0].value))
        if isinstance(node, ast.Subscript) and _name_of(node.value) == "Literal":
            strings(node.slice)
        targets: list[ast.AST] = []
        value: ast.AST | None = None
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        elif isinstance(node, ast.keyword) and node.arg:
            targets, value = [ast.Name(node.arg)], node.value
        if value is not None and any(
            part in _name_of(t).lower() for t in targets for part in _DISTRIBUTION_TARGETS
        ):
            strings(value)
        if isinstance(node, ast.Call) and _name_of(node.func) in _VERSION_CALLS and node.args:
            strings(node.args[0])
    return out


def literals() -> dict[tuple[str, str], list[int]]:
    """Every (module, name) a built-in engine or format name stands in as a literal where the
    rules above do not allow it, with its lines."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module in REGISTRIES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _skipped(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in skipped:
                continue
            name = node.value
            if not isinstance(name, str) or name not in FORMATS | ENGINES:
                continue
            own = module in (f"formats/{name}.py", f"engines/{name}.py")
            served = name in FORMATS and module.startswith("engines/")
            if not own and not served:
                found.setdefault((module, name), []).append(node.lineno)
    return found


def test_no_engine_or_format_name_stands_as_a_literal_outside_its_module() -> None:
    found = literals()
    new = {f"{m}:{lines[0]}: {n!r}" for (m, n), lines in found.items() if (m, n) not in ALLOWED}
    assert not new, (
        "an engine's or a format's name as a literal outside its own module and the registries: "
        "ask the format or the engine (a property of it) instead: " + ", ".join(sorted(new))
    )


def test_every_allowed_literal_is_still_there() -> None:
    """The allow-list only shrinks: an entry whose literal is gone is removed."""
    gone = sorted(f"{m}: {n!r}" for m, n in ALLOWED if (m, n) not in literals())
    assert not gone, f"remove from ALLOWED, the literal is gone: {', '.join(gone)}"


def test_the_scan_sees_a_literal_where_one_stands(tmp_path: Path) -> None:
    """The scan itself: a branch on a format's name is seen; a docstring, a Literal type and a
    distribution's name are not."""
    code = '''"""gguf"""
from typing import Literal
libraries = ("transformers",)
kind: Literal["gguf"]
def f(fmt):
    """vllm"""
    return fmt == "gguf"
'''
    tree = ast.parse(code)
    skipped = _skipped(tree)
    left = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skipped
    ]
    assert left == ["gguf"]
