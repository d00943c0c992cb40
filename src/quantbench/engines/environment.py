"""Creating an engine's environment of its own (``Engine.environment``): ``quantbench env NAME``.

An engine whose server must not run in quantbench's interpreter declares an
:class:`~quantbench.engines.base.EngineEnvironment`: its interpreter, the requirement files that
make it, or the command that does where a venv and ``pip install -r`` are not enough (vLLM's
``make vllm``). This module creates it, so a plugin engine's environment needs no Makefile target:
its requirements file is enough.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import venv
from pathlib import Path

from quantbench.engines.base import EngineEnvironment
from quantbench.errors import UserError


def venv_root(python: Path) -> Path:
    """The venv that holds interpreter ``python`` (``<root>/bin/python``)."""
    if python.parent.name not in ("bin", "Scripts"):
        raise UserError(
            f"{python}: an engine environment's interpreter must be a venv's <root>/bin/python "
            "to be created by quantbench; create it yourself, or point the setting there"
        )
    return python.parent.parent


def create_environment(engine: str, env: EngineEnvironment, project: Path = Path(".")) -> str:
    """Create ``engine``'s environment where it does not exist yet; what was done, in words.
    Relative paths (the interpreter, the requirement files) are the project's."""
    python = env.python if env.python.is_absolute() else project / env.python
    if python.exists():
        return f"{engine}: its environment exists ({env.python}); nothing to do"
    if env.setup is not None:
        subprocess.run(shlex.split(env.setup), cwd=project, check=True)
        return f"{engine}: created by `{env.setup}` ({env.python})"
    missing = [r for r in env.requirements if not (project / r).is_file()]
    if missing:
        raise UserError(
            f"{engine}: requirement file(s) {', '.join(missing)} not found in {project}"
        )
    root = venv_root(python)
    # pip only where something is to be installed: a standard-library-only server needs none
    venv.EnvBuilder(with_pip=bool(env.requirements), clear=False).create(root)
    for requirements in env.requirements:
        subprocess.run(
            [str(root / "bin/python"), "-m", "pip", "install", "--disable-pip-version-check",
             "-q", "-r", str(project / requirements)],
            check=True,
        )  # fmt: skip
    return f"{engine}: created {root} with Python {sys.version.split()[0]}" + (
        f" and {', '.join(env.requirements)}" if env.requirements else " (standard library only)"
    )


__all__ = ["create_environment", "venv_root"]
