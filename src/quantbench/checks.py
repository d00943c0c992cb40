"""What `quantbench validate` checks, each described once where it is made, in a line.

The checks that read params.yaml and every settings model describe themselves in their own
module, as a constant (``CHECKS``, with ``CHECKS_WHERE``: ``params``, ``settings``,
``secrets``, ``ports``), so that no stage imports this module for them; the preflight checks,
which only validate runs, register themselves with :func:`check`. docs/FAULTS.md's table ("What
validate checks") is generated from both (``python -m quantbench.validation --checks``), and a
test holds the page to it: a check added without its line, or a line left for a check removed,
fails that test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Literal, TypeVar

Where = Literal["params.yaml", "settings", "preflight"]
# Reading the file, then each section's settings, then what the params point to: the order
# validate runs them in, and the table's.
ORDER: tuple[Where, ...] = ("params.yaml", "settings", "preflight")

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class Check:
    """One check: a short name, what it refuses (one line), and where it runs."""

    name: str
    what: str
    where: Where
    module: str


_REGISTERED: dict[tuple[str, str], Check] = {}


def check(name: str, what: str, where: Where = "preflight") -> Callable[[F], F]:
    """Register the decorated function as the check ``name`` (returned unchanged)."""

    def decorate(func: F) -> F:
        _REGISTERED[(func.__module__, name)] = Check(name, what, where, func.__module__)
        return func

    return decorate


def declared(module: ModuleType) -> list[Check]:
    """The checks a module describes in its ``CHECKS`` constant."""
    where: Where = getattr(module, "CHECKS_WHERE", "settings")
    return [Check(n, w, where, module.__name__) for n, w in getattr(module, "CHECKS", ())]


def registered(modules: Iterable[ModuleType] = ()) -> list[Check]:
    """The checks ``modules`` declare and every one registered, in the order validate runs
    them (then by module, then as each module lists them)."""
    found = [c for m in modules for c in declared(m)] + list(_REGISTERED.values())
    position = {(c.module, c.name): i for i, c in enumerate(found)}
    return sorted(
        found, key=lambda c: (ORDER.index(c.where), c.module, position[(c.module, c.name)])
    )


def markdown_table(checks: list[Check]) -> str:
    """The table docs/FAULTS.md carries: one row per check."""
    lines = ["| where | check | what it refuses |", "|---|---|---|"]
    lines += [f"| {c.where} | {c.name} | {c.what} |" for c in checks]
    return "\n".join(lines)
