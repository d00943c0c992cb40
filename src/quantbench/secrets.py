"""Secrets: which names hold them, which values are secret, and their removal from what we write.

A secret reaches a server through an environment variable named in ``engines.<e>.secret_env`` (its
value read from quantbench's own environment at launch, never from params.yaml, whose values DVC
copies into dvc.lock), or through the API key of a load target. Everything quantbench writes or
shows (command lines, environments, headers, log tails copied into rows, summaries and the HTML
report, ``quantbench validate``'s printout) goes through :func:`redact`: a flag or variable whose
name says "secret" has its value hidden, and every known secret value is hidden wherever it
appears, so an engine that echoes its command line into its log cannot leak it either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

# (the one mark of a hidden secret, and the masking of NAME=value: in errors, below every
# message that may hold one, and named here too, where secrets are handled)
from quantbench.errors import REDACTED as REDACTED
from quantbench.errors import mask_assignments as mask_assignments

# What validate checks here, one line each: docs/FAULTS.md's table is made of these
# (quantbench.checks; `python -m quantbench.validation --checks`).
CHECKS_WHERE = "settings"
CHECKS: tuple[tuple[str, str], ...] = (
    (
        "secrets",
        "a secret written into params.yaml (copied into dvc.lock): a secret-named extra_env value, "
        "a secret flag's value in extra_args, a secret_env entry written NAME=value (its value "
        "never shown)",
    ),
)

SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd"})
# Short flags that take a secret (their long names say so, they do not): llama.cpp's -hft is
# --hf-token.
SHORT_SECRET_FLAGS = frozenset({"-hft"})
# A secret shorter than this is not searched for inside other text (it would match by chance).
MIN_SECRET_LENGTH = 4


def is_secret_name(name: str) -> bool:
    """Whether a flag or variable name holds a secret: a known short flag, or a word of it
    (split at - and _) is one of SECRET_WORDS, so `--api-key` and `HF_TOKEN` are,
    `--max-num-batched-tokens` is not."""
    if name in SHORT_SECRET_FLAGS:
        return True
    return any(word in SECRET_WORDS for word in re.split(r"[-_]+", name.lower()))


def _flag(arg: str) -> tuple[str, str | None]:
    flag, eq, value = arg.partition("=")
    return flag, (value if eq else None)


def secret_values(argv: Sequence[str] = (), env: Mapping[str, str] | None = None) -> set[str]:
    """The values a command line and an environment hold as secrets."""
    found: set[str] = set()
    take_next = False
    for arg in argv:
        if take_next:
            found.add(arg)
            take_next = False
            continue
        flag, value = _flag(arg)
        if arg.startswith("-") and is_secret_name(flag):
            if value is not None:
                found.add(value)
            else:
                take_next = True
    for name, value in (env or {}).items():
        if is_secret_name(name) and value:
            found.add(value)
    return {v for v in found if v}


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value (long enough to search for) replaced by ***."""
    for value in sorted(set(secrets), key=len, reverse=True):
        if len(value) >= MIN_SECRET_LENGTH:
            text = text.replace(value, REDACTED)
    return text


def redact_argv(argv: Sequence[str], secrets: Iterable[str] = ()) -> list[str]:
    """argv with the values of secret flags hidden (`--api-key V`, `--hf-token=V`, `-hft V`) and
    every known secret value hidden wherever else it appears."""
    secrets = set(secrets) | secret_values(argv)
    out: list[str] = []
    hide = False
    for arg in argv:
        flag, value = _flag(arg)
        if hide:
            out.append(REDACTED)
            hide = False
        elif arg.startswith("-") and is_secret_name(flag):
            out.append(f"{flag}={REDACTED}" if value is not None else arg)
            hide = value is None
        else:
            out.append(redact(arg, secrets))
    return out


def redact_env(env: Mapping[str, str], secrets: Iterable[str] = ()) -> dict[str, str]:
    """An environment with secret-named values hidden, and known secret values wherever they are."""
    secrets = set(secrets) | secret_values(env=env)
    return {k: REDACTED if is_secret_name(k) else redact(v, secrets) for k, v in env.items()}


def redact_mapping(data: object) -> object:
    """A JSON-like structure with the text under secret-looking keys hidden (for printouts of
    settings, e.g. `quantbench validate`). What is hidden is a value that can be a secret: text
    (an environment variable's, a header's). A number or a switch never is, whatever its key says
    (``merge.min_next_token_agreement: 1.0`` is a share, shown as it is)."""
    if isinstance(data, Mapping):
        return {
            k: (
                REDACTED
                if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v
                else redact_mapping(v)
            )
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [redact_mapping(v) for v in data]
    return data


# An environment variable's name, as a shell takes it (what secret_env entries must be).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def secret_env_problem(names: Sequence[str]) -> str | None:
    """Why entries of ``engines.<e>.secret_env`` are not variable names, or None. An entry
    written ``NAME=value`` holds the secret itself, which params.yaml must never (DVC copies
    params into dvc.lock): the message shows the name and hides the value."""
    bad = [n for n in names if not ENV_NAME.fullmatch(n)]
    if not bad:
        return None
    shown = ", ".join(repr(mask_assignments(n)) for n in bad)
    assigned = [n.partition("=")[0] for n in bad if "=" in n]
    fix = (
        f"list the name alone (secret_env: [{assigned[0]}]) and export {assigned[0]}=... in the "
        "environment quantbench runs in; the value written here is in params.yaml: remove it "
        "there (and from git history, if committed)"
        if assigned
        else "give names of environment variables (letters, digits and _, not starting with a "
        "digit)"
    )
    return f"secret_env: {shown} is not a variable name; {fix}"
