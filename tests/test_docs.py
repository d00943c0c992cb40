"""Every path and module the docs name exists in the tree.

README.md and every docs/*.md are read whole (prose, code spans, code blocks, links). What counts
as a name of the repository:

- a link's target (``[text](target)``, not a URL or an anchor), relative to the page's folder;
- a path that starts with an entry of the repository's top level (``stages/bench.py``,
  ``docs/BENCH.md``, ``profiles/gpu.yaml``, ``plugins/``, ``.ci/run``), anywhere in the text;
- a path relative to the package (``formats/build.py``, ``cli/gather.py``, ``load/``) in code
  spans and blocks, or ending in ``.py`` in prose: its first part a subpackage of
  ``src/quantbench``;
- a path that starts with ``../``, relative to the page's folder: it must stay in the repository;
- a dotted name ``quantbench.x.y``: its longest prefix that is a module or package of
  ``src/quantbench``, and what follows, if anything, a name that module defines.

A placeholder (``<name>``, ``[@<registry>]``, ``*``) matches any file, and what the pipeline
produces is skipped: the patterns of .gitignore and every ``outs``, ``metrics`` and ``plots``
path of dvc.yaml (``models/``, ``reports/``, ``build/``, ``.venv``: a fresh clone has none of it).
So are the names that are no part of the tree on purpose: the broken files the fault suite writes
into its project copy (the strings of faults/), and ``EXAMPLES`` below, each with why.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "quantbench"

# a run of path characters with at least one slash, not inside a longer word, URL or absolute path
PATH = re.compile(r"(?<![\w./~$:@-])((?:\.\./)*[\w.-]+(?:/[\w.<>*@\[\]{}+-]*)+)")
MODULE = re.compile(r"(?<![\w./-])quantbench(?:\.[A-Za-z_]\w*)+")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_BLOCK = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
PLACEHOLDER = re.compile(r"<[^<>/]*>|\[[^\[\]/]*\]|\{[^{}/]*\}")

# Names the docs give to files that are no part of the tree on purpose, with why: a user's own
# file in an example, a file a command writes, a path in another project. (The files the fault
# suite writes into its project copy, docs/FAULTS.md's table, are read from faults/ itself.)
EXAMPLES = {
    "plugins/my_*.py": "docs/EXTENDING.md's example plugin, the one a user writes",
    "imports/<name>.json": "what `quantbench import` writes (docs/REPORT.md)",
    "data/nope.txt": "the missing calibration file of an error message (docs/QUANTIZE.md)",
    "benchmarks/multi_turn": "a folder of vLLM's repository (docs/LOAD.md)",
}


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@cache
def top_level() -> frozenset[str]:
    return frozenset(name for name in os.listdir(REPO) if name != ".git")


@cache
def subpackages() -> frozenset[str]:
    return frozenset(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def _dvc_outputs(node: object) -> list[str]:
    """Every path under an ``outs``, ``metrics`` or ``plots`` key of dvc.yaml, at any depth."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("outs", "metrics", "plots") and isinstance(value, list):
                for entry in value:
                    found.extend(entry if isinstance(entry, dict) else [entry])
            else:
                found.extend(_dvc_outputs(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_dvc_outputs(value))
    return [str(path) for path in found]


@cache
def produced() -> tuple[str, ...]:
    """Patterns of what is no part of the tree: .gitignore's, and dvc.yaml's outputs."""
    patterns = []
    for line in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            patterns.append(line)
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    for out in _dvc_outputs(dvc.get("stages", {})):
        patterns.append("/" + re.sub(r"\$\{[^}]*\}", "*", out).strip("/"))
    return tuple(patterns)


def is_produced(rel: str) -> bool:
    """Whether a path relative to the repository lies in what .gitignore or dvc.yaml names."""
    parts = [part for part in rel.strip("/").split("/") if part]
    for pattern in produced():
        anchored = "/" in pattern.rstrip("/")
        body = pattern.strip("/")
        for n in range(1, len(parts) + 1):
            if anchored and fnmatch.fnmatchcase("/".join(parts[:n]), body):
                return True
            if not anchored and fnmatch.fnmatchcase(parts[n - 1], body):
                return True
    return False


def exists(rel: str, base: Path = REPO) -> bool:
    """Whether the path (placeholders matching anything) names something under ``base``."""
    rel = rel.rstrip("/")
    if not re.search(r"[<>\[\]{}*]", rel):
        return (base / rel).exists()
    pattern = PLACEHOLDER.sub("*", rel)
    return any(base.glob(pattern))


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def code_ranges(text: str) -> list[tuple[int, int]]:
    """The spans of code blocks and code spans in a page, as offsets."""
    ranges = [m.span() for m in CODE_BLOCK.finditer(text)]
    rest = CODE_BLOCK.sub(lambda m: " " * len(m.group(0)), text)
    ranges += [m.span() for m in CODE_SPAN.finditer(rest)]
    return ranges


def trimmed(name: str) -> str:
    """A matched path without the sentence's full stop or a link text's closing bracket."""
    while name.endswith(".") or (name.endswith("]") and name.count("[") < name.count("]")):
        name = name[:-1]
    return name


@cache
def fault_suite_files() -> frozenset[str]:
    """Every string the fault suite's code holds: the broken files it writes into its project
    copy (``data/bad-train.jsonl``, ``../../outside``) are named in docs/FAULTS.md's table."""
    strings = set()
    for source in (REPO / "faults").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
    return frozenset(strings)


def is_example(rel: str) -> bool:
    return rel in fault_suite_files() or any(fnmatch.fnmatchcase(rel, p) for p in EXAMPLES)


def package_path_problem(name: str) -> str | None:
    """Why a path relative to src/quantbench names nothing there, or None. A module may be
    named without ``.py`` (``workloads/spec``) and with one of its names (``bench/results.f``)."""
    if exists(name, PACKAGE) or exists(name.rstrip("/") + ".py", PACKAGE):
        return None
    head, _, attr = name.rpartition("/")
    module, _, attr = attr.partition(".")
    file = PACKAGE / head / f"{module}.py"
    if attr and file.is_file():
        if attr.split(".")[0] in defined_names(file):
            return None
        return f"{name} ({head}/{module}.py defines no {attr.split('.')[0]})"
    return f"{name} (in src/quantbench)"


def path_problems(page: Path, text: str) -> list[str]:
    """Each repository path the page names that is not in the tree, with its line."""
    problems = []
    where = page.relative_to(REPO)
    code = code_ranges(text)

    def missing(rel: str) -> bool:
        return not (is_produced(rel) or is_example(rel) or exists(rel))

    linked = set()
    for match in LINK.finditer(text):
        target = match.group(1).split("#")[0]
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            continue
        linked.add(match.start(1))
        line = line_of(text, match.start())
        resolved = Path(os.path.normpath(page.parent / target))
        if not resolved.is_relative_to(REPO):
            problems.append(f"{where}:{line}: {target} (outside the repository)")
        elif missing(str(resolved.relative_to(REPO))):
            problems.append(f"{where}:{line}: {target} (link)")

    for match in PATH.finditer(text):
        if match.start(1) in linked:
            continue
        name = trimmed(match.group(1))
        first = name.split("/")[0]
        line = line_of(text, match.start())
        in_code = any(start <= match.start() < end for start, end in code)
        if name.startswith("../"):
            resolved = Path(os.path.normpath(page.parent / name))
            if is_example(name):
                continue
            if not resolved.is_relative_to(REPO):
                problems.append(f"{where}:{line}: {name} (outside the repository)")
            elif missing(str(resolved.relative_to(REPO))):
                problems.append(f"{where}:{line}: {name}")
        elif first in top_level():
            if missing(name):
                problems.append(f"{where}:{line}: {name}")
        elif first in subpackages() and (in_code or name.endswith(".py")):
            problem = package_path_problem(name)
            if problem:
                problems.append(f"{where}:{line}: {problem}")
    return problems


@cache
def defined_names(module_file: Path) -> frozenset[str]:
    """The names a module's top level defines: functions, classes, assignments, imports."""
    tree = ast.parse(module_file.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return frozenset(names)


def module_problem(dotted: str) -> str | None:
    """Why ``quantbench.x.y`` names nothing in src/quantbench, or None."""
    parts = dotted.split(".")[1:]
    found, file = 0, PACKAGE / "__init__.py"
    for n in range(1, len(parts) + 1):
        base = PACKAGE.joinpath(*parts[:n])
        if (base / "__init__.py").is_file():
            found, file = n, base / "__init__.py"
        elif base.with_suffix(".py").is_file():
            found, file = n, base.with_suffix(".py")
            break
        else:
            break
    rest = parts[found:]
    if not rest or rest[0] in defined_names(file):
        return None
    module = ".".join(["quantbench", *parts[:found]])
    return f"{dotted}: no module {module}.{rest[0]}, and {module} defines no {rest[0]}"


def module_problems(page: Path, text: str) -> list[str]:
    where = page.relative_to(REPO)
    problems = []
    for match in MODULE.finditer(text):
        problem = module_problem(match.group(0))
        if problem:
            problems.append(f"{where}:{line_of(text, match.start())}: {problem}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    problems = path_problems(page, page.read_text(encoding="utf-8"))
    assert problems == [], "paths named but not in the tree:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_module_a_page_names_exists(page: Path) -> None:
    problems = module_problems(page, page.read_text(encoding="utf-8"))
    assert problems == [], "modules named but not in src/quantbench:\n" + "\n".join(problems)


def test_the_checks_find_what_is_missing_and_pass_what_is_not() -> None:
    """The extraction on a page made up for it: what must be caught, and what must not be."""
    page = REPO / "docs" / "MADE_UP.md"
    text = "\n".join(
        [
            "Run `python tools/run_tests.py` and `tools/no_such_tool.py`; see docs/NO_PAGE.md,",
            "[a link](NOPE.md), [the index](README.md), [a site](https://dvc.org/doc/x/y.md),",
            "`stages/<name>.py`, `stages/*.py`, `plugins/`, `.ci/run`, tok/s, ~/.cache/quantbench/x,",
            "`reports/bench/<pair>/probe.json`, `models/variants/<name>/variant.json`,",
            "`build/test-artifacts/x.log`, `formats/build.py`, `formats/nothing.py`,",
            "`../shared/DESIGN.md`, /work/elsewhere/x.py, $PWD/tools/x.",
        ]
    )
    assert path_problems(page, text) == [
        "docs/MADE_UP.md:2: NOPE.md (link)",
        "docs/MADE_UP.md:1: tools/no_such_tool.py",
        "docs/MADE_UP.md:1: docs/NO_PAGE.md",
        "docs/MADE_UP.md:5: formats/nothing.py (in src/quantbench)",
        "docs/MADE_UP.md:6: ../shared/DESIGN.md",
    ]
    assert module_problem("quantbench.config") is None
    assert module_problem("quantbench.config.Config") is None
    assert module_problem("quantbench.schemas.io.read") is None
    assert module_problem("quantbench.no_such_module") is not None
    assert module_problem("quantbench.config.no_such_name") is not None
