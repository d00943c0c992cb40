"""Imports of quantbench modules inside functions: only where they defer a heavy library.

A static scan (``ast``) of ``src/quantbench``. The module-level imports (a module's body, its
``if`` and ``try`` blocks too, ``if TYPE_CHECKING:`` blocks aside) make a graph between
quantbench modules; from it, which heavy libraries (``HEAVY``) each module loads when it is
imported, directly or through other quantbench modules. An import of a quantbench module inside
a function is allowed only where the module it imports loads a heavy library that the importing
module does not load already, or where hoisting it to the top would make an import cycle; an
allowed one says so where it stands, in a comment on its line (or above its run of imports) that
names the library it defers (``# deferred: torch``) or the cycle (``# deferred: cycle``).
Every other one belongs at the top of its module. What a module loads by name at run time
(``importlib``, a plugin's entry point) the scan does not see.

    python tests/test_imports.py    # every problem
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest
from tools.layers import body_imports, is_type_checking

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "quantbench"

# What counts as heavy: half a second or more to import, measured with `python -X importtime -c
# 'import X'` (on a shared 2-core machine; an idle one takes about half); numpy and loguru
# (0.3 s), pydantic, yaml, jinja2 and plotly (0.1-0.2 s) are not. vllm and llama_cpp are not in
# quantbench's own environment: they run in their engine's.
HEAVY = frozenset(
    {
        "torch",  # 6.0 s
        "safetensors.torch",  # torch
        "transformers",  # 2.7 s, torch with its models
        "accelerate",  # 5.2 s
        "peft",  # 14 s (torch, transformers)
        "datasets",  # 1.6 s
        "gptqmodel",  # 18 s
        "llmcompressor",  # 16 s
        "compressed_tensors",  # 15 s
        "lm_eval",  # its evaluator loads torch and transformers
        "vllm",  # its own environment; torch
        "llama_cpp",  # its own build
        "locust",  # 1.9 s, and gevent's monkey patching
        "gevent",  # monkey patching: must not share a process with a model library's threads
        "scipy",  # scipy.stats 2.7 s, scipy.optimize 1.7 s
        "dvc",  # dvc.api 1.4 s
        "gguf",  # 0.6 s
        "aiohttp",  # 0.8 s (the scripted server's)
    }
)


def _ancestors(module: str) -> list[str]:
    """The packages Python imports before ``module``: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@dataclass(frozen=True)
class Deferred:
    """One import of a quantbench module inside a function."""

    module: str  # the importing module
    target: str  # the module imported
    file: str  # relative to src
    line: int
    comment: str  # the comments on its lines and above its run of imports, lowercased


class Tree:
    """The modules of one package under ``src`` and their imports, read without running them."""

    def __init__(self, src: Path, package: str = PACKAGE, heavy: frozenset[str] = HEAVY):
        self.src, self.package, self.heavy = src, package, heavy
        self.files: dict[str, Path] = {}
        for path in sorted((src / package).rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            self.files[".".join(parts)] = path
        self.edges: dict[str, set[str]] = {m: set() for m in self.files}
        self.external: dict[str, set[str]] = {m: set() for m in self.files}
        self.deferred: list[Deferred] = []
        for module in self.files:
            self._read(module)

    # -- reading

    def _is_pkg(self, module: str) -> bool:
        return self.files[module].name == "__init__.py"

    def _resolve(self, name: str) -> str | None:
        """The deepest module of the package that ``name`` (a module or a name in one) denotes."""
        parts = name.split(".")
        while parts:
            if ".".join(parts) in self.files:
                return ".".join(parts)
            parts.pop()
        return None

    def _names(self, node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
        """What the statement names, absolute: ``from M import a`` -> ``M.a`` (a module, or a
        name in ``M``)."""
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if self._is_pkg(module) else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        return [f"{base}.{a.name}" for a in node.names]

    def _ours(self, name: str) -> bool:
        return name == self.package or name.startswith(self.package + ".")

    def _read(self, module: str) -> None:
        path = self.files[module]
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, str(path))
        comments = _comments(text)
        at_import_time = body_imports(tree)  # as the layering check reads a module
        hidden: set[int] = set()  # under TYPE_CHECKING, at any depth
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and is_type_checking(node):
                hidden.update(id(n) for n in ast.walk(node))
        heads = _run_heads(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in hidden:
                continue
            names = self._names(node, module)
            ours = {self._resolve(n) for n in names if self._ours(n)} - {None, module}
            if id(node) in at_import_time:
                self.external[module].update(n for n in names if not self._ours(n))
                for target in ours:
                    assert target is not None
                    self.edges[module].add(target)
                    # importing a.b.c runs a and a.b first (those above the importer aside)
                    self.edges[module].update(
                        a for a in _ancestors(target) if a not in _ancestors(module) and a != module
                    )
                continue
            said = _said(node, heads.get(id(node), node.lineno), comments)
            for target in sorted(t for t in ours if t is not None):
                self.deferred.append(
                    Deferred(module, target, str(path.relative_to(self.src)), node.lineno, said)
                )

    # -- what loads what

    def reach(self, start: str) -> set[str]:
        """Every quantbench module that importing ``start`` runs, ``start`` included."""
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(self.edges[m])
        return seen

    @cached_property
    def _heavy_direct(self) -> dict[str, frozenset[str]]:
        return {
            m: frozenset(h for h in self.heavy for n in names if n == h or n.startswith(h + "."))
            for m, names in self.external.items()
        }

    def loads(self, module: str) -> frozenset[str]:
        """The heavy libraries that importing ``module`` loads (its packages' included)."""
        found: set[str] = set()
        for start in [*(a for a in _ancestors(module) if a in self.files), module]:
            for m in self.reach(start):
                found |= self._heavy_direct[m]
        return frozenset(found)

    def cycle(self, importer: str, target: str) -> bool:
        """Whether importing ``target`` at the top of ``importer`` would make an import cycle."""
        starts = [target, *(a for a in _ancestors(target) if a not in _ancestors(importer))]
        return any(importer in self.reach(s) for s in starts if s in self.files)

    def problems(self) -> list[str]:
        """Every deferred import not allowed, or allowed but not saying why, as file:line lines."""
        found = []
        for d in self.deferred:
            defers = sorted(self.loads(d.target) - self.loads(d.module))
            if defers:
                if not any(
                    re.search(rf"\b{part}\b", d.comment) for h in defers for part in h.split(".")
                ):
                    found.append(
                        f"{d.file}:{d.line}: {d.target} (deferred for {', '.join(defers)}: "
                        f"say so beside it, `# deferred: {defers[0]}`)"
                    )
            elif self.cycle(d.module, d.target):
                if "cycle" not in d.comment:
                    found.append(
                        f"{d.file}:{d.line}: {d.target} (deferred for an import cycle: say so "
                        "beside it, `# deferred: cycle`)"
                    )
            else:
                found.append(
                    f"{d.file}:{d.line}: {d.target} (defers no heavy library and hides no cycle: "
                    "import it at the top)"
                )
        return found


def _comments(text: str) -> dict[int, tuple[str, bool]]:
    """Each line's comment, and whether it is the whole line."""
    found: dict[int, tuple[str, bool]] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = (tok.string, not tok.line[: tok.start[1]].strip())
    return found


def _run_heads(tree: ast.Module) -> dict[int, int]:
    """For each import statement, the first line of the run of imports it ends (statements one
    right after the other in the same block)."""
    heads: dict[int, int] = {}
    for parent in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if not isinstance(block, list):
                continue
            head, last_end = None, None
            for stmt in block:
                if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    head = None
                    continue
                if head is None or last_end is None or stmt.lineno != last_end + 1:
                    head = stmt.lineno
                heads[id(stmt)] = head
                last_end = stmt.end_lineno or stmt.lineno
    return heads


def _said(node: ast.stmt, head: int, comments: dict[int, tuple[str, bool]]) -> str:
    """The comments on an import's own lines and on the comment lines just above the run of
    imports it stands in, lowercased."""
    end = node.end_lineno or node.lineno
    said = [comments[n][0] for n in range(node.lineno, end + 1) if n in comments]
    above = head - 1
    while above in comments and comments[above][1]:
        said.append(comments[above][0])
        above -= 1
    return " ".join(said).lower()


@pytest.fixture(scope="module")
def problems() -> dict[str, list[str]]:
    by_file: dict[str, list[str]] = {}
    for line in Tree(SRC).problems():
        by_file.setdefault(line.split(":", 1)[0], []).append(line)
    return by_file


def test_quantbench_imports_inside_functions_only_defer_a_heavy_library(
    problems: dict[str, list[str]],
) -> None:
    wrong = [line for lines in (problems[file] for file in sorted(problems)) for line in lines]
    assert not wrong, "imports inside functions:\n" + "\n".join(wrong)


# -- the scan itself, on planted trees


def _tree(root: Path, files: dict[str, str]) -> Tree:
    src = root / "src"
    for name, code in files.items():
        path = src / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in [path.parent, *path.parent.parents]:
            if folder == src:
                break
            (folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(code))
    return Tree(src, "pkg", frozenset({"torch"}))


PLANTED = {
    "model.py": "import torch\n",
    "wraps.py": "from pkg.model import torch\n",  # torch through another module
    "light.py": "X = 1\n",
}


def test_deferring_a_module_that_loads_a_heavy_library_is_allowed_when_said(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path, {**PLANTED, "user.py": """
        def f():
            from pkg.wraps import torch  # deferred: torch
            return torch

        def g():
            # deferred: torch
            from pkg import light
            from pkg.model import torch
            return light, torch
        """})  # fmt: skip
    # the comment heads the run of two imports: it holds for both, but pkg.light defers nothing
    assert tree.problems() == [
        "pkg/user.py:8: pkg.light (defers no heavy library and hides no cycle: import it at the top)"
    ]


def test_an_unsaid_or_needless_deferral_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {**PLANTED, "user.py": """
        import torch

        def f():
            from pkg.model import torch  # deferred: torch (but torch is loaded already)
            return torch

        def g():
            from pkg.wraps import torch
            return torch
        """, "other.py": """
        def h():
            from pkg.wraps import torch
            return torch
        """})  # fmt: skip
    found = tree.problems()
    assert any(p.startswith("pkg/user.py:5: pkg.model (defers no heavy") for p in found), found
    assert any(p.startswith("pkg/user.py:9: pkg.wraps (defers no heavy") for p in found), found
    assert any(p.startswith("pkg/other.py:3: pkg.wraps (deferred for torch: say so") for p in found)
    assert len(found) == 3, found


def test_a_deferral_that_breaks_a_cycle_is_allowed_when_said(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from pkg import a  # deferred: cycle\n    return a\n",
        "c.py": "from pkg.d import Y\nX = Y\n",
        "d/__init__.py": "from pkg.d.x import Y\n",  # hoisting into d.x would loop through d
        "d/x.py": "Y = 1\ndef f():\n    from pkg.c import X\n    return X\n",
    })  # fmt: skip
    assert tree.problems() == ["pkg/d/x.py:3: pkg.c (deferred for an import cycle: say so "
                               "beside it, `# deferred: cycle`)"]  # fmt: skip


def test_type_checking_imports_are_not_counted(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {**PLANTED, "user.py": """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from pkg.model import torch

        def f():
            if TYPE_CHECKING:
                from pkg.light import X
            from pkg.model import torch  # deferred: torch
            return torch
        """})  # fmt: skip
    assert tree.problems() == []


if __name__ == "__main__":  # every problem: python tests/test_imports.py
    for line in Tree(SRC).problems():
        print(line)
