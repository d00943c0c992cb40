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

REDACTED = "***"
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
    """A JSON-like structure with the values under secret-looking keys hidden (for printouts of
    settings, e.g. `quantbench validate`)."""
    if isinstance(data, Mapping):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_name(k) and v else redact_mapping(v))
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [redact_mapping(v) for v in data]
    return data
