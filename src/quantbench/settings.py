"""The one base of every settings model: what a user writes in params.yaml or on a command line.

Unknown keys are errors (a typo must not silently become a default), and settings are immutable
once validated (nothing downstream can change what was validated). Each package declares its own
section on this base (`lora/spec.py`, `engines/<engine>.py`, `workloads/spec.py`, ...); `config.py`
composes them into the whole file.

Three rules hold for every field of every section, here once rather than field by field:

- **numbers are numbers**: a field that takes a number refuses a switch (YAML 1.1 reads an
  unquoted ``on``/``off``/``yes``/``no`` as a boolean, and pydantic would take ``true`` as 1), a
  text that would be coerced (``"5"``, and ``1e309``, which YAML reads as text and pydantic as
  infinity), NaN and infinity (``.nan``, ``.inf``): each is refused with the field's range;
- **text is one line of printable characters**: a control character (a newline, a tab, an
  escape) or a bidirectional override in a name, a path or a label is a mistake (a path with a
  newline, a label that breaks a report's table), refused with the value shown as Python writes
  it, so the character is visible. Fields that take any value (``request_fields``, a stop
  sequence may be a newline) are left alone;
- **a lower bound is not above its upper**: a section's ``min_X`` above its ``max_X`` (either
  given, the other its default) is refused naming both values.

A label the report prints as it is (``bench.currency``) is a :data:`Label`: a short word with no
markup.
"""

from __future__ import annotations

import math
import types
import typing
import unicodedata
from pathlib import PurePath
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

# What validate checks here, one line each: docs/FAULTS.md's table is made of these
# (quantbench.checks; `python -m quantbench.validation --checks`).
CHECKS_WHERE = "settings"
CHECKS: tuple[tuple[str, str], ...] = (
    (
        "numbers",
        'a number field given a switch (YAML\'s on/off/yes/no), a text (`"5"`, `1e309`), NaN or '
        "infinity; every number within its field's range; a min_ key above its max_",
    ),
    (
        "text",
        "a control character (newline, tab, escape) or a bidirectional override in any name, path "
        "or label, shown as Python writes it",
    ),
    (
        "labels",
        "a label the report prints as it is (bench.currency) holding markup or other than letters, "
        "digits, currency signs and ' .-_/'",
    ),
    (
        "keys",
        "a key a section does not have (with the keys it has); every choice outside its allowed values",
    ),
)

# Bidirectional overrides and isolates: they reorder how text displays (a name that reads as
# another), never part of a name or a path anyone meant.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


def control_character(text: str) -> int | None:
    """The index of the first control character or bidirectional override in ``text``."""
    for i, ch in enumerate(text):
        if ch in _BIDI or ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0:
            return i
    return None


def _members(annotation: Any) -> list[Any]:
    """The types an annotation allows: Annotated and unions opened, Literal values kept."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _members(arg)]
    return [annotation]


def _takes(members: list[Any], value: Any) -> bool:
    """Whether ``value``'s type is one these members take as it is (a Literal: that value)."""
    kind = type(value)
    for t in members:
        if t is kind or (kind is str and isinstance(t, type) and issubclass(t, PurePath)):
            return True
        if typing.get_origin(t) is typing.Literal and any(
            type(v) is kind and v == value for v in typing.get_args(t)
        ):
            return True
    return False


def takes_bool(annotation: Any) -> bool:
    """Whether a field of this annotation takes a switch (or anything)."""
    members = _members(annotation)
    return any(t in (bool, Any, object) for t in members) or _takes(members, True)


def _is_number(members: list[Any]) -> bool:
    return any(
        t in (int, float)
        or (
            typing.get_origin(t) is typing.Literal
            and any(type(v) in (int, float) for v in typing.get_args(t))
        )
        for t in members
    )


def _bounds(info: Any) -> str:
    """A field's declared range in words (``>= 1``, ``> 0 and < 1``), or ''."""
    found = []
    for meta in getattr(info, "metadata", ()):
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(meta, attr, None)
            if value is not None:
                found.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return " and ".join(found)


def _number_words(members: list[Any], bounds: str) -> str:
    kind = "a whole number" if int in members and float not in members else "a number"
    kind = f"{kind} {bounds}" if bounds else kind
    names = [
        repr(v)
        for t in members
        if typing.get_origin(t) is typing.Literal
        for v in typing.get_args(t)
        if isinstance(v, str)
    ]
    return " or ".join([kind, *names])


def value_problem(value: Any, annotation: Any, bounds: str = "") -> str | None:
    """Why ``value`` (as YAML or a caller gave it) is not what ``annotation`` means, by the two
    rules of this module; None where it is (or where pydantic's own checks will say more)."""
    members = _members(annotation)
    if any(t in (Any, object) for t in members):
        return None  # a field that takes anything: its own code judges it
    if isinstance(value, bool):
        if _is_number(members) and not _takes(members, value):
            return (
                f"a switch where {_number_words(members, bounds)} goes (YAML reads an unquoted "
                "on / off / yes / no / true / false as a switch); give the number"
            )
        return None
    if isinstance(value, str):
        at = control_character(value)
        # text types include str's subclasses (the typed SLO: quantbench.slo.Slo), which parse
        # their text and would otherwise take a control character as part of it
        textual = (isinstance(t, type) and issubclass(t, str) for t in members)
        if at is not None and (any(textual) or any(_takes([t], value) for t in members)):
            return (
                f"holds the control character {value[at]!r} at position {at}; names, paths and "
                "labels are one line of printable characters: remove it"
            )
        if _is_number(members) and not _takes(members, value) and str not in members:
            return (
                f"a text where {_number_words(members, bounds)} goes (YAML read it as text: a "
                "quoted number, or an exponent without a dot such as 1e309); write the number "
                "unquoted, within its range"
            )
        return None
    if isinstance(value, float) and not math.isfinite(value) and _is_number(members):
        return f"not a finite number; give {_number_words(members, bounds)}"
    if isinstance(value, list | tuple):
        for t in members:
            args = typing.get_args(t)
            if typing.get_origin(t) in (list, tuple, set, frozenset) and args:
                for j, item in enumerate(value):
                    item_type = (
                        args[0]
                        if typing.get_origin(t) is not tuple
                        else args[min(j, len(args) - 1)]
                    )
                    if item_type is Ellipsis:
                        item_type = args[0]
                    problem = value_problem(item, item_type)
                    if problem:  # (the item itself not repeated: an argument may be a secret)
                        return f"item {j}: {problem}"
                return None
        return None
    if isinstance(value, dict):
        for t in members:
            args = typing.get_args(t)
            if typing.get_origin(t) is dict and len(args) == 2:
                for key, item in value.items():
                    problem = value_problem(key, args[0]) or value_problem(item, args[1])
                    if problem:
                        return f"entry {key!r}: {problem}"
                return None
    return None


def label_problem(text: str, most: int = 16) -> str | None:
    """Why ``text`` is not a label (None where it is): a short word printed as it is beside
    figures in the report's tables, its Markdown and its chart titles (``bench.currency``), so
    letters, digits, currency signs and `` .-_/`` only, no markup."""
    allowed = all(ch.isalnum() or unicodedata.category(ch) == "Sc" or ch in " .-_/" for ch in text)
    if text.strip() and allowed and len(text) <= most and text == text.strip():
        return None
    return (
        f"a label is 1 to {most} letters, digits, currency signs ($, €, £, ¥) or ' .-_/' (it "
        "is printed as it is in the report's tables and chart titles); give one, e.g. USD"
    )


def _label(text: str) -> str:
    problem = label_problem(text)
    if problem:
        raise ValueError(problem)
    return text


Label = Annotated[str, AfterValidator(_label)]
"""A short free-text label that reaches the report (see :func:`label_problem`)."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def order_problem(data: dict[str, Any], fields: dict[str, Any]) -> str | None:
    """A lower bound above its upper bound among a section's keys (``min_requests`` above
    ``max_requests``, ``min_rounds`` above ``max_rounds``): either given, the other given or
    its default, both numbers."""

    def value(key: str) -> Any:
        if key in data:
            return data[key]
        field = fields.get(key)
        return None if field is None else field.default

    for key in fields:
        if not key.startswith("min_") or f"max_{key[4:]}" not in fields:
            continue
        top = f"max_{key[4:]}"
        low, high = value(key), value(top)
        if (key in data or top in data) and _number(low) and _number(high) and low > high:
            return (
                f"{key} {low:g} is above {top} {high:g}; lower {key} or raise {top} (the lower "
                "bound must not exceed the upper)"
            )
    return None


class Settings(BaseModel):
    """Base for every settings model: unknown keys are errors, values are frozen, numbers are
    numbers and text has no control characters (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # A model validator, not a field validator for "*": pydantic allows no field validator on
    # the fields that discriminate a union (a workload's prompts.source). Wrapped, so that the
    # model's own errors are reported beside these, all at once.
    @model_validator(mode="wrap")
    @classmethod
    def _numbers_and_text(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        mine: list[InitErrorDetails] = []
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                problem = (
                    None
                    if field is None
                    else value_problem(value, field.annotation, _bounds(field))
                )
                if problem:
                    mine.append(
                        InitErrorDetails(
                            type=PydanticCustomError(
                                "value_error", "{problem}", {"problem": problem}
                            ),
                            loc=(name,),
                            input=value,
                        )
                    )
        if isinstance(data, dict) and not mine:
            order = order_problem(data, cls.model_fields)
            if order:
                raise ValueError(order)
        try:
            validated = handler(data)
        except ValidationError as exc:
            if not mine:
                raise
            refused = {e["loc"] for e in mine}
            theirs = [
                InitErrorDetails(
                    type=e["type"], loc=e["loc"], input=e["input"], ctx=e.get("ctx", {})
                )
                for e in exc.errors(include_url=False)
                if e["loc"][:1] not in refused
            ]
            raise ValidationError.from_exception_data(cls.__name__, [*mine, *theirs]) from None
        if mine:
            raise ValidationError.from_exception_data(cls.__name__, mine)
        return validated
