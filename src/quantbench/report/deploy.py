"""best_config.json's ``deploy``: the winning server's command as a deployment runs it.

The bench records the exact command it measured (``command``): this clone's absolute paths, the
free port it picked, and flags that only the harness needs (llama-server's ``--metrics`` and
``--slot-save-path``, vLLM's prompt-token details and its development endpoints). The deployable
form keeps everything that shapes the serving (the engine, the model, every setting, threads,
context) and changes three things:

* a path inside the project becomes relative to it (run the command from the project's root; a
  path reached through a link in the project, as ``build/llama.cpp`` is, keeps the link's name);
* the address and port become placeholders the user fills (``{host}``, ``{port}`` in ``argv``;
  ``${HOST:-127.0.0.1}`` and ``${PORT:-8000}`` in the shell line);
* the flags and variables each engine declares as the harness's own
  (:attr:`Engine.harness_args`, :attr:`Engine.harness_env`) are left out, and so are secrets,
  named instead under ``secret_env`` for the user to export.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from quantbench.engines.registry import get_engine
from quantbench.errors import UserError
from quantbench.secrets import REDACTED, is_secret_name

HOST, PORT = "{host}", "{port}"
DEFAULTS = {"host": "127.0.0.1", "port": 8000}
_PLACEHOLDERS = {"--host": HOST, "--port": PORT}


def _links(root: Path) -> list[tuple[Path, Path]]:
    """(where a link inside the project points, the link's path relative to the project), for
    the links one or two levels down (``build/llama.cpp`` -> the machine's shared build)."""
    found = []
    for depth in ("*", "*/*"):
        for link in root.glob(depth):
            if link.is_symlink():
                found.append((link.resolve(), link.relative_to(root)))
    return found


def relative_to_project(value: str, root: Path, links: list[tuple[Path, Path]]) -> str:
    """``value`` relative to the project when it is an absolute path inside it (directly or
    through one of its links); any other value as it is."""
    if not value.startswith("/"):
        return value
    path = Path(value)
    for base, name in [(root, Path()), (root.resolve(), Path()), *links]:
        if path.is_relative_to(base):
            return str(name / path.relative_to(base))
    return value


def deployable(
    argv: list[str],
    env: dict[str, str],
    engine: Any,
    root: Path,
    secret_env: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """The ``deploy`` entry: argv and env to run from the project's root, with placeholders."""
    links = _links(root)
    harness_args: dict[str, int] = getattr(engine, "harness_args", {})
    harness_env: frozenset[str] = getattr(engine, "harness_env", frozenset())
    out: list[str] = []
    dropped: list[str] = []
    skip = 0
    for i, arg in enumerate(argv):
        if skip:
            skip -= 1
            continue
        if arg in harness_args:
            skip = harness_args[arg]
            dropped.append(" ".join(argv[i : i + 1 + skip]))
            continue
        if out and out[-1] in _PLACEHOLDERS:
            out.append(_PLACEHOLDERS[out[-1]])
            continue
        out.append(relative_to_project(arg, root, links))
    # a secret's value is never recorded (it reads REDACTED): the user exports it
    secrets = set(secret_env) | {k for k, v in env.items() if is_secret_name(k) or v == REDACTED}
    kept = {
        k: relative_to_project(v, root, links)
        for k, v in env.items()
        if k not in harness_env and k not in secrets
    }
    dropped += sorted(k for k in env if k in harness_env)
    shell = [_shell_word(a) for a in out]
    env_words = [f"{k}={shlex.quote(v)}" for k, v in sorted(kept.items())]
    return {
        "argv": out,
        "model_name": engine.model_name_in(out) if engine is not None else None,
        "env": kept,
        "secret_env": sorted(secrets),
        "cwd": "the project's root (the folder that holds params.yaml)",
        "placeholders": dict(DEFAULTS),
        "command_line": " ".join([*env_words, *shell]),
        "left_out": dropped,
    }


def engine_or_none(name: str) -> Any:
    """The engine that declares its harness-only flags; None for one this process does not know
    (a plugin not loaded here: its command is then kept whole)."""
    try:
        return get_engine(name)
    except UserError:
        return None


def deploy_entry(
    argv: list[str],
    env: dict[str, str],
    engine: str,
    root: Path,
    settings: dict[str, Any] | None,
) -> dict[str, Any]:
    """The winner's ``deploy`` entry from the command its bench measured, for ``engine`` by
    name (best_config.json's, and the command the summary and the dashboard print)."""
    secret_env = (settings or {}).get("secret_env", ())
    return deployable(argv, env, engine_or_none(engine), root, secret_env)


def _shell_word(arg: str) -> str:
    if arg == HOST:
        return f'"${{HOST:-{DEFAULTS["host"]}}}"'
    if arg == PORT:
        return f'"${{PORT:-{DEFAULTS["port"]}}}"'
    return shlex.quote(arg)


def fill(deploy: dict[str, Any], host: str, port: int) -> list[str]:
    """``deploy['argv']`` with its placeholders filled: what a user (or a test) runs."""
    return [host if a == HOST else str(port) if a == PORT else a for a in deploy["argv"]]
