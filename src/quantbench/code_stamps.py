"""Stamps of each registered engine's and format's code, for DVC (``reports/code/``).

A ``foreach`` stage keyed by one format or engine depends on that one's stamp
(:class:`quantbench.schemas.code.CodeStamp`), not on a module path: a plugin's module is not under
``src/``, and DVC cannot compute a path from a registry. The ``validate`` stage, which imports the
plugins and the registries anyway, writes every stamp; a stamp's bytes follow its files' (the module's and the
``code_files`` it declares: a plugin engine's server script), so
editing ``formats/gptq.py`` (or ``plugins/my_format.py``) reruns that format's stages only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import sys
from pathlib import Path

from quantbench.engines import registry as engines
from quantbench.formats import registry as formats
from quantbench.schemas import io as schema_io
from quantbench.schemas.code import CodeStamp


def _module_file(module: str) -> Path:
    loaded = sys.modules.get(module)
    origin = getattr(loaded, "__file__", None)
    if origin is None:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
    if origin is None:
        raise RuntimeError(f"module {module} has no file to stamp (a namespace package?)")
    return Path(origin).resolve()


def _sha256(path: Path) -> str:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: declared in an engine's or format's code_files, missing")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shown(path: Path, project: Path) -> str:
    """The path relative to the project where it lies inside it: stamps are the same in every
    clone of the project."""
    try:
        return path.relative_to(project.resolve()).as_posix()
    except ValueError:
        return str(path)


def code_stamps(project: Path) -> list[CodeStamp]:
    """One stamp per registered engine and format (the built-in ones and the plugins' imported
    by params.yaml), each naming the module that defines it: for a built-in one the module its
    registry imports (what tools/dag.py analyses), for a plugin's the module of its class."""
    out: list[CodeStamp] = []
    tables = (("engines", engines.BUILTIN, engines.all_engines()),
              ("formats", formats.BUILTIN, formats.all_formats()))  # fmt: skip
    for kind, builtin, registered in tables:
        for name, obj in sorted(registered.items()):
            module = builtin.get(name) or type(obj).__module__
            file = _module_file(module)
            extra = [Path(f).resolve() for f in obj.code_files]
            out.append(
                CodeStamp(
                    kind=kind,  # type: ignore[arg-type]
                    name=name,
                    module=module,
                    file=_shown(file, project),
                    sha256=_sha256(file),
                    code_files={_shown(f, project): _sha256(f) for f in extra},
                    builtin=name in builtin,
                )
            )
    return out


def write_code_stamps(folder: Path, project: Path) -> list[Path]:
    """Write every stamp under ``folder`` (``<kind>/<name>.json``), replacing what was there: a
    plugin no longer named has no stamp, so a stage still keyed by it fails on the missing file."""
    if folder.exists():
        shutil.rmtree(folder)
    written = []
    for stamp in code_stamps(project):
        path = folder / stamp.kind / f"{stamp.name}.json"
        schema_io.write(path, stamp)
        written.append(path)
    return written


__all__ = ["code_stamps", "write_code_stamps"]
