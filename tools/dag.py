"""Keep dvc.yaml's code dependencies equal to what each stage imports.

Each stage's code dependencies are its script plus every module of ``src/quantbench`` in the
script's import closure: every ``import`` statement anywhere in a module (functions included,
because heavy imports there are the rule), every module the code starts as a program (a string
naming a module of the package that has a ``__main__`` guard: ``python -m
quantbench.load.runner``, the load process), plus the ``__init__.py`` of every package on the way.
The two registries load built-in engines and formats by name; that is handled explicitly:

* a stage that can load any engine (or format) depends on all built-in ones, and on the
  ``plugins`` folder (params.yaml's plugin files live there);
* a ``foreach`` stage keyed by one engine (``${item.engine}``) or one format (``${item.format}``)
  depends on that one's code stamp, ``reports/code/engines/${item.engine}.json`` (written by the
  ``validate`` stage for every registered one, plugins included: quantbench.code_stamps), plus
  what any built-in one imports. A module path could not name a plugin's code.

    python tools/dag.py --check     # exit 1 and show the differences (make check-dag), and
                                    # the layers' problems (tools/layers.py)
    python tools/dag.py --write     # rewrite the code entries of each stage's deps

The modules are not listed in dvc.yaml one by one: each stage depends on its script and on its
closure's stamp, ``reports/closures/<script>[@<registry>].json``, which the first stage
(``closures``: this tool run as ``--stamp``, under a second, whenever ``src/quantbench`` or
``stages`` change) writes with every module's and template's sha256. A stamp's bytes change
exactly when a file of that stage's closure does, so DVC reruns what it reran before; but
dvc.lock, which DVC reads and rewrites whole at each stage's end, holds a few entries a stage
instead of one per module (3,007 ``path:`` entries, 417 KB: about 2.2 s a stage with its YAML
library, 70 s over a run's 31 stages).

Only entries under ``stages/``, ``src/``, ``reports/code/``, ``reports/closures/`` and ``plugins``
are managed; data, model and report deps are kept as written, except that a literal path equal
to a ``data:`` setting is refused (write ``${data.<key>}`` so the dependency follows the
setting).

    python tools/dag.py --stamp reports/closures   # the closures stage: the stamps
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import layers

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "quantbench"
PLUGINS = "plugins"
STAMPS = "reports/code"
CLOSURES = "reports/closures"
CLOSURE_STAGE = "closures"
CODE_PREFIXES = ("stages/", "src/", f"{STAMPS}/", f"{CLOSURES}/", PLUGINS)
REGISTRIES = {
    "engines": ("quantbench.engines.registry", "quantbench.engines.{}", "${item.engine}"),
    "formats": ("quantbench.formats.registry", "quantbench.formats.{}", "${item.format}"),
}


def module_file(name: str, src: Path = SRC) -> Path | None:
    """The file that defines module ``name`` (a package's __init__.py), or None."""
    base = src / Path(*name.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def module_name(path: Path, src: Path = SRC) -> str:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, src: Path = SRC) -> set[str]:
    """Project modules ``path`` imports anywhere, with the packages that contain them.

    Each file is parsed once per version (its path, size and mtime): one check walks every
    stage's closure, the same modules again and again (2,700 parses of about 150 files, 28 s of
    every `make test`'s check and of each dag test on an AVX2-only EPYC, against 1 s)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, str(src))
    if key not in _IMPORTED:
        _IMPORTED[key] = frozenset(_parse_imports(path, src))
    return set(_IMPORTED[key])


_IMPORTED: dict[tuple[str, int, int, str], frozenset[str]] = {}


def _parse_imports(path: Path, src: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    current = module_name(path, src) if path.is_relative_to(src) else ""
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        module, names = layers.imported_names(node, current, is_pkg)
        if module:
            names = [module, *names]
        # a module the code starts as a program (`python -m quantbench.load.runner`: the load
        # process) runs for the stage as much as one it imports: named by a string constant
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _runnable(node.value, src)
        ):
            names = [node.value]
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                parts = name.split(".")
                for i in range(1, len(parts) + 1):
                    if module_file(".".join(parts[:i]), src) is not None:
                        found.add(".".join(parts[:i]))
    return found


def _runnable(name: str, src: Path) -> bool:
    """Whether ``name`` is a module of the package that runs as a program (``python -m``)."""
    if not name.startswith(PACKAGE + ".") or not name.replace(".", "").replace("_", "").isalnum():
        return False
    path = module_file(name, src)
    return path is not None and '__name__ == "__main__"' in path.read_text(encoding="utf-8")


def closure(roots: Iterable[str], src: Path = SRC, stop: set[str] | None = None) -> set[str]:
    """Every project module reachable from ``roots`` by imports (``stop`` ones not entered)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if stop and name in stop:
            continue
        path = module_file(name, src)
        if path is not None:
            todo.extend(imported(path, src) - seen)
    return seen


def template_only(kind: str, src: Path = SRC) -> set[str]:
    """The built-in modules of a registry that a stage keyed by it reaches only through its
    template (``${item.format}``): all of them, except those another built-in one imports (a
    change to such a one reruns every variant). What several share lives outside them, in a
    helper module every variant's stage lists by name (formats/compressor.py)."""
    registry, pattern, _ = REGISTRIES[kind]
    plugin_modules = {pattern.format(n) for n in builtin_modules(registry, src)}
    imported_by_another = set()
    for name in plugin_modules:
        path = module_file(name, src)
        assert path is not None, name
        imported_by_another |= (closure(imported(path, src), src) & plugin_modules) - {name}
    return plugin_modules - imported_by_another


def builtin_modules(registry: str, src: Path = SRC) -> dict[str, str]:
    """name -> module of a registry's BUILTIN table, read from its source (not imported)."""
    path = module_file(registry, src)
    assert path is not None, registry
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if isinstance(target, ast.Name) and target.id == "BUILTIN" and node.value is not None:
            return {k: v for k, v in ast.literal_eval(node.value).items()}
    raise ValueError(f"{registry} has no BUILTIN table")


@dataclass(frozen=True)
class StageCode:
    name: str
    script: str
    deps: list[str]


def code_deps(script: Path, keyed_by: set[str], src: Path = SRC) -> list[str]:
    """The code dependencies of one stage script (paths relative to the repository)."""
    repo = src.parent
    modules = closure(imported(script, src), src)
    extra: set[str] = set()
    templated: list[str] = []
    reaches_all = False
    for kind, (registry, pattern, template) in REGISTRIES.items():
        if registry not in modules:
            continue
        plugin_modules = {pattern.format(n) for n in builtin_modules(registry, src)}
        reach = closure(plugin_modules, src)
        if kind in keyed_by:
            templated.append(f"{STAMPS}/{kind}/{template}.json")
            extra |= reach - template_only(kind, src)
        else:
            extra |= reach
            reaches_all = True
    modules |= extra
    # a module loaded only through the template must not also be listed by name
    for kind in keyed_by & set(REGISTRIES):
        modules -= template_only(kind, src)
    files = {module_file(m, src) for m in modules}
    # what a package reads at run time lives in its templates/ folder (the report's page, script
    # and style): a change there must rerun the stage as a change to its code does
    data = {
        f.parent / "templates"
        for f in files
        if f is not None and '"templates"' in f.read_text(encoding="utf-8")
    }
    files |= {d for d in data if d.is_dir()}
    rel = sorted(p.relative_to(repo).as_posix() for p in files if p is not None)
    # the plugins' folder: a stage that loads every engine or format loads the plugins' too; a
    # stage keyed by one depends on that one's stamp instead (a plugin edit reruns its own stages)
    plugins = [PLUGINS] if reaches_all and not keyed_by & set(REGISTRIES) else []
    return [script.relative_to(repo).as_posix(), *rel, *plugins, *templated]


_SCRIPT = re.compile(r"python\s+(stages/[\w./-]+\.py)")


def _keyed_by(stage: dict) -> set[str]:
    foreach = str(stage.get("foreach", ""))
    if "bench.pairs" in foreach:
        return {"engines"}
    if foreach.strip() == "${variants}":
        return {"formats"}
    return set()


def stages_of(dvc: dict) -> Iterable[tuple[str, dict, dict]]:
    """(name, stage mapping, the mapping that holds cmd and deps) for every stage."""
    for name, stage in dvc["stages"].items():
        yield name, stage, stage["do"] if "foreach" in stage else stage


def load_yaml(path: Path):
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml, yaml.load(path.read_text(encoding="utf-8"))


def data_settings(repo: Path) -> dict[str, str]:
    import yaml

    params = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8")) or {}
    return {str(v): k for k, v in (params.get("data") or {}).items() if isinstance(v, str)}


def stamped(deps: list[str]) -> list[str]:
    """Of a stage's code dependencies, those its closure stamp holds: the package's modules and
    templates (the script, the plugins' folder and the engine or format stamps stay in
    dvc.yaml: DVC resolves ``${item.engine}`` there, and a plugin lies outside the package)."""
    return [d for d in deps if d.startswith("src/")]


def stamp_name(script: Path, keyed_by: set[str]) -> str:
    """A closure stamp's file name: the script's, and the registry its stage is keyed by
    (``bench@engines.json``), which changes what the closure holds (:func:`code_deps`)."""
    return "@".join([script.stem, *sorted(keyed_by & set(REGISTRIES))]) + ".json"


def dvc_deps(script: Path, keyed_by: set[str], src: Path = SRC) -> list[str]:
    """What dvc.yaml lists for one stage's code: its script, its closure stamp, and the rest of
    :func:`code_deps` that the stamp does not hold."""
    deps = code_deps(script, keyed_by, src)
    inside = set(stamped(deps))
    return [
        deps[0],
        f"{CLOSURES}/{stamp_name(script, keyed_by)}",
        *(d for d in deps[1:] if d not in inside),
    ]


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(f for f in path.rglob("*") if f.is_file() and "__pycache__" not in f.parts)


def closure_stamp(script: Path, keyed_by: set[str], repo: Path = REPO) -> dict:
    """One stamp: the sha256 of every file of a script's closure that dvc.yaml does not list."""
    files: dict[str, str] = {}
    for dep in stamped(code_deps(script, keyed_by, repo / "src")):
        for path in _files(repo / dep):
            files[path.relative_to(repo).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {
        "script": script.relative_to(repo).as_posix(),
        "keyed_by": sorted(keyed_by),
        "files": files,
    }


def stamp_keys(script: Path, src: Path = SRC) -> list[set[str]]:
    """Every way a stage may run ``script``: alone, and keyed by each registry it reaches."""
    modules = closure(imported(script, src), src)
    return [set(), *({kind} for kind, (reg, _, _) in REGISTRIES.items() if reg in modules)]


def write_stamps(folder: Path, repo: Path = REPO) -> list[Path]:
    """The ``closures`` stage: the stamps of every script in stages/, each way a stage may run it
    (so they follow the code alone, not dvc.yaml, which DVC refuses as a dependency), replacing
    the folder whole (written beside it, then renamed: an interrupted stage leaves the last
    stamps or none). Sorted keys: the same closure gives the same bytes."""
    scratch = folder.with_name(f".{folder.name}.tmp")
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    names = []
    for script in sorted((repo / "stages").glob("*.py")):
        for keyed_by in stamp_keys(script, repo / "src"):
            name = stamp_name(script, keyed_by)
            stamp = closure_stamp(script, keyed_by, repo)
            text = json.dumps(stamp, indent=1, sort_keys=True) + "\n"
            (scratch / name).write_text(text, encoding="utf-8")
            names.append(name)
    if folder.exists():
        shutil.rmtree(folder)
    scratch.rename(folder)
    return [folder / name for name in names]


# the closures stage's dependencies: what the stamps are computed from (whole folders, so a new
# module or script reruns it; .dvcignore leaves out Python's caches)
CLOSURE_DEPS = ["tools/dag.py", "tools/layers.py", "src/quantbench", "stages"]


def closure_stage_problems(dvc: dict) -> list[str]:
    stage = dvc["stages"].get(CLOSURE_STAGE)
    if stage is None:
        return [f"{CLOSURE_STAGE}: missing (it writes the stamps {CLOSURES}/<script>.json)"]
    problems = []
    if str(stage.get("cmd")) != f"python tools/dag.py --stamp {CLOSURES}":
        problems.append(f"{CLOSURE_STAGE}: cmd must be `python tools/dag.py --stamp {CLOSURES}`")
    if [str(d) for d in stage.get("deps", [])] != CLOSURE_DEPS:
        problems.append(f"{CLOSURE_STAGE}: deps must be {CLOSURE_DEPS}")
    outs = [dict(o) if isinstance(o, dict) else o for o in stage.get("outs", [])]
    if outs != [{CLOSURES: {"cache": False}}]:
        problems.append(f"{CLOSURE_STAGE}: outs must be [{CLOSURES}: {{cache: false}}]")
    return problems


def check(repo: Path = REPO) -> list[str]:
    """Every difference between dvc.yaml and the import closures, as lines to print."""
    _, dvc = load_yaml(repo / "dvc.yaml")
    data = data_settings(repo)
    problems: list[str] = closure_stage_problems(dvc)
    for name, stage, body in stages_of(dvc):
        match = _SCRIPT.search(str(body.get("cmd", "")))
        if not match:
            continue
        script = repo / match.group(1)
        want = dvc_deps(script, _keyed_by(stage), repo / "src")
        have = [str(d) for d in body.get("deps", []) if str(d).startswith(CODE_PREFIXES)]
        missing = sorted(set(want) - set(have))
        extra = sorted(set(have) - set(want))
        for path in missing:
            problems.append(f"{name}: missing dependency {path}")
        for path in extra:
            problems.append(f"{name}: {path} is listed but not imported by the stage")
        for dep in body.get("deps", []):
            if str(dep) in data:
                problems.append(
                    f"{name}: {dep} is written literally; use ${{data.{data[str(dep)]}}} so the "
                    "dependency follows the setting"
                )
    return problems


def write(repo: Path = REPO) -> int:
    yaml, dvc = load_yaml(repo / "dvc.yaml")
    changed = 0
    for _, stage, body in stages_of(dvc):
        match = _SCRIPT.search(str(body.get("cmd", "")))
        if not match:
            continue
        want = dvc_deps(repo / match.group(1), _keyed_by(stage), repo / "src")
        others = [d for d in body.get("deps", []) if not str(d).startswith(CODE_PREFIXES)]
        new = [*want, *others]
        if [str(d) for d in body.get("deps", [])] != new:
            body["deps"] = new
            changed += 1
    with open(repo / "dvc.yaml", "w", encoding="utf-8") as handle:
        yaml.dump(dvc, handle)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="fail on any difference")
    group.add_argument("--write", action="store_true", help="rewrite the code deps in dvc.yaml")
    group.add_argument(
        "--stamp", type=Path, metavar="FOLDER", help="write each stage's closure stamp there"
    )
    parser.add_argument("--repo", type=Path, default=REPO)
    args = parser.parse_args(argv)
    if args.stamp is not None:
        written = write_stamps(args.stamp, args.repo)
        print(f"closures: {len(written)} closure stamps in {args.stamp}")
        return 0
    if args.write:
        print(f"dvc.yaml: code dependencies of {write(args.repo)} stage(s) rewritten")
        return 0
    problems = check(args.repo)
    for line in problems:
        print(line)
    if problems:
        print(
            f"\n{len(problems)} difference(s) between dvc.yaml and the stages' imports; "
            "run `make dag-deps` (python tools/dag.py --write) and review the diff",
            file=sys.stderr,
        )
    else:
        print("dvc.yaml: every stage's code dependencies match its imports")
    layer_problems = layers.check(args.repo / "src")
    for line in layer_problems:
        print(line)
    if layer_problems:
        print(
            f"\n{len(layer_problems)} problem(s) with the layers (tools/layers.py)", file=sys.stderr
        )
    else:
        print("src/quantbench: every import goes down the layers (tools/layers.py)")
    if problems or layer_problems:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
