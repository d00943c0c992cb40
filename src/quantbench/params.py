"""Reading params.yaml: the file, its plugins, and one section at a time.

:mod:`quantbench.config` reads the whole file into one typed config (`quantbench validate`, the
one-off commands, the stages that read several sections); the offline stages read only the
sections they use with :func:`section` (so their code dependencies stay their own, see
docs/ARCHITECTURE.md).
Reading refuses what YAML lets through silently: an empty file, a key written twice (YAML keeps the
last one), a top level that is not a mapping. Values YAML reads as something the user probably did
not mean (``on``/``off``/``yes``/``no`` become booleans) are named in the messages of the settings
that receive them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from quantbench.errors import UserError, mask_assignments
from quantbench.settings import takes_bool
from quantbench.textfile import read_utf8

DEFAULT_PARAMS = Path("params.yaml")
M = TypeVar("M", bound=BaseModel)


class ConfigError(UserError):
    """params.yaml is missing, unreadable or holds values that are not allowed."""


# libyaml's parser where PyYAML was built with it (the wheels are): the same events and marks,
# ten times faster than the pure-Python one, which validate would otherwise run twice a file.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[misc, valid-type]
    """A safe loader that refuses a mapping key written twice."""


def _node_text(node: yaml.Node) -> str:
    """A node as it was written, roughly (for a message: the object may not be built yet)."""
    if isinstance(node, yaml.SequenceNode):
        return "[" + ", ".join(_node_text(n) for n in node.value[:5]) + "]"
    if isinstance(node, yaml.MappingNode):
        return "{...}"
    return repr(node.value)


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *defaults`: its keys are the merged mapping's, checked there
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if not isinstance(key, Hashable):
            shown = _node_text(key_node)
            raise ConfigError(
                f"line {line}: a key is a {type(key).__name__} ({shown}); keys are names: "
                "write the key as a plain word"
            )
        if key in seen:
            raise ConfigError(
                f"key {key!r} is written twice (lines {seen[key]} and {line}); YAML would keep "
                "only the last one silently: remove one"
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,  # type: ignore[arg-type]
)


# What a params file holds is a few hundred values a few levels deep: far past these limits
# is a file that attacks the parser (nesting that exhausts Python's stack; aliases of aliases
# that expand to millions of values once anything walks them), not a configuration.
MAX_DEPTH = 64
MAX_VALUES = 100_000

# What validate checks here, one line each: docs/FAULTS.md's table is made of these
# (quantbench.checks; `python -m quantbench.validation --checks`).
CHECKS_WHERE = "params.yaml"
CHECKS: tuple[tuple[str, str], ...] = (
    (
        "YAML",
        "an empty file, a key written twice, a key that is not a name, a tab-indented line, text "
        f"that is not YAML (with the line); nesting deeper than {MAX_DEPTH} levels or aliases that "
        f"expand to more than {MAX_VALUES:,} values",
    ),
)


def _shown(value: Any, limit: int = 200) -> str:
    """``value`` as Python writes it (a newline shows as \\n), cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _size_problem(text: str) -> str | None:
    """How ``text`` exceeds MAX_DEPTH or MAX_VALUES, read from YAML's event stream (iterative:
    nothing is built, so neither a deep nesting nor an alias bomb costs anything here)."""
    sizes: dict[str, int] = {}  # anchor -> values its node expands to
    stack: list[tuple[str | None, int]] = []  # open collections: (anchor, values so far)
    total = 0
    for event in yaml.parse(text, Loader=_SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            size = sizes.get(event.anchor, 1)
        elif isinstance(event, yaml.ScalarEvent):
            size = 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            stack.append((event.anchor, 1))
            if len(stack) > MAX_DEPTH:
                return (
                    f"line {event.start_mark.line + 1} is nested more than {MAX_DEPTH} levels "
                    "deep; a params file needs a few: flatten it"
                )
            continue
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, size = stack.pop()
            if anchor is not None:
                sizes[anchor] = size
        else:
            continue
        total += size
        if stack:
            anchor, inside = stack[-1]
            stack[-1] = (anchor, inside + size)
        if total > MAX_VALUES:
            return (
                f"its aliases expand to more than {MAX_VALUES:,} values (line "
                f"{event.start_mark.line + 1}); write the values out, or alias fewer of them"
            )
    return None


def _tab_lines(text: str) -> list[int]:
    """The lines whose indentation holds a tab (YAML indents with spaces only)."""
    return [
        n
        for n, line in enumerate(text.splitlines(), 1)
        if "\t" in line[: len(line) - len(line.lstrip(" \t"))]
    ]


def parse_yaml(text: str, origin: str = "params.yaml") -> dict[str, Any]:
    """The mapping in ``text``; ConfigError for an empty file, bad YAML, a repeated key, a
    tab-indented line, or a file past MAX_DEPTH or MAX_VALUES."""
    try:
        problem = _size_problem(text)
        if problem:
            raise ConfigError(problem)
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    except yaml.YAMLError as exc:
        tabs = _tab_lines(text)
        if tabs:
            shown = ", ".join(str(n) for n in tabs[:5]) + (" ..." if len(tabs) > 5 else "")
            first = text.splitlines()[tabs[0] - 1]
            raise ConfigError(
                f"{origin}: line {shown} is indented with a tab ({_shown(first)}); YAML "
                "indents with spaces only: replace each tab by spaces"
            ) from None
        raise ConfigError(f"{origin}: not valid YAML: {exc}") from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys limit)
        raise ConfigError(f"{origin}: a value YAML cannot read ({exc}); shorten it") from None
    if raw is None:
        raise ConfigError(
            f"{origin} is empty: it must hold the pipeline's sections (model:, lora:, variants:, "
            "...); restore it with `git checkout params.yaml`"
        )
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping of sections, got {type(raw).__name__}")
    return raw


def read_params(path: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """Read params.yaml (or another file of its layout) and import the plugins it names."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such parameters file (run from the repository root)")
    raw = parse_yaml(read_utf8(path, "params"), str(path))
    import_plugins(raw.get("plugins") or [], base=path.resolve().parent)
    return raw


_LOADED: dict[str, None] = {}  # the plugins imported in this process, as import_plugins takes them


def import_plugins(plugins: Any, base: Path = Path(".")) -> None:
    """Import each plugin (a module name, or a .py file relative to ``base``) once.

    A plugin registers engines or formats as it is imported (see docs/EXTENDING.md).
    """
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise ConfigError(f"plugins: expected a list of module names or .py files, got {plugins!r}")
    for plugin in plugins:
        if plugin.endswith(".py"):
            path = (base / plugin).resolve()
            name = f"quantbench_plugin_{path.stem}"
            if name in sys.modules:
                continue
            if not path.is_file():
                raise ConfigError(f"plugins: {plugin} does not exist (relative to {base})")
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            _LOADED[str(path)] = None
        else:
            try:
                importlib.import_module(plugin)
            except ImportError as exc:
                raise ConfigError(f"plugins: cannot import {plugin!r} ({exc})") from None
            _LOADED[plugin] = None


def loaded_plugins() -> tuple[str, ...]:
    """The plugins this process imported (files as absolute paths), for a child process that
    consults the registries to import the same ones first (``import_plugins(list(...))``)."""
    return tuple(_LOADED)


def _lookup(raw: Mapping[str, Any], dotted: str) -> Any:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _allowed_keys(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """The field names of the settings model that holds ``loc``, for 'unknown key' messages."""
    for part in loc[:-1]:
        fields = getattr(model, "model_fields", None)
        if fields is None:
            return []
        field = fields.get(part)
        if field is None or not isinstance(field.annotation, type):
            return []
        model = field.annotation
    return list(getattr(model, "model_fields", {}))


# YAML 1.1 reads these unquoted words as booleans: `flash_attn: on` arrives as True.
_YAML_BOOLEANS = {True: "on / yes / true", False: "off / no / false"}


# Tags of the settings' discriminated unions: pydantic puts the tag into an error's location
# (workload.load.0.concurrency.label); users wrote no such key, so it is left out.
UNION_TAGS = frozenset({"concurrency", "rate", "dataset", "random"})


def _user_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    out: list[Any] = []
    for i, part in enumerate(loc):
        after_index = i > 0 and isinstance(loc[i - 1], int)
        if after_index and part in UNION_TAGS and i + 1 < len(loc):
            continue
        out.append(part)
    return tuple(out)


def describe(error: Any, prefix: str = "", model: Any = None) -> str:
    """One validation error as 'key: got value; what is allowed (and how to fix it)'."""
    loc = _user_loc(tuple(error["loc"]))
    key = ".".join(str(p) for p in ((prefix,) if prefix else ()) + loc) or "(top level)"
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc) if model is not None else []
        hint = f"allowed keys here: {', '.join(allowed)}" if allowed else "check the spelling"
        return f"{key}: unknown key; {hint}"
    value = error.get("input")
    if "secret_env" in loc:  # entries may be NAME=value by mistake: never echo a value
        value = mask_assignments(value)
    # a server's arguments and environment may hold a secret (refused, but never echoed)
    hidden = isinstance(value, dict) or ("extra_args" in loc and isinstance(value, list))
    shown = ("{...}" if isinstance(value, dict) else "[...]") if hidden else _shown(value)
    message = str(error["msg"]).removeprefix("Value error, ")
    if not loc and kind == "value_error":  # a check across fields: its message says it all
        return f"{prefix}: {message}" if prefix else message
    if kind == "literal_error":
        message = message.replace("Input should be", "allowed:")
    if kind == "union_tag_invalid" and isinstance(value, dict):  # the tag, not the section
        tag = str(error["ctx"]["discriminator"]).strip("'")
        value = value.get(tag)
        return (
            f"{key}.{tag}: got {_shown(value)}; allowed: {error['ctx']['expected_tags']}"
            f"{yaml_boolean_hint(value, 'literal_error')}"
        )
    if kind == "value_error" and isinstance(value, bool) and not _takes_bool(model, loc):
        kind = "literal_error"  # a validator refused the switch YAML made of a word
    return f"{key}: got {shown}; {message}{yaml_boolean_hint(value, kind)}"


def _takes_bool(model: Any, loc: tuple[Any, ...]) -> bool:
    """Whether the field at ``loc`` of ``model`` takes a switch (True where it cannot tell)."""
    for part in loc[:-1]:
        fields = getattr(model, "model_fields", None)
        field = fields.get(part) if fields and isinstance(part, str) else None
        if field is None or not isinstance(field.annotation, type):
            return True
        model = field.annotation
    fields = getattr(model, "model_fields", None)
    field = fields.get(loc[-1]) if fields and loc and isinstance(loc[-1], str) else None
    return True if field is None else takes_bool(field.annotation)


def yaml_boolean_hint(value: Any, kind: str) -> str:
    """Where YAML made a switch of a word a text field wanted (``flash_attn: on``), the words
    it reads so and the fix; '' otherwise."""
    if isinstance(value, bool) and kind in ("literal_error", "string_type", "enum", "path_type"):
        return (
            f"; YAML reads an unquoted {_YAML_BOOLEANS[value]} as {str(value).lower()}: "
            "quote the word (e.g. 'on')"
        )
    return ""


def describe_errors(exc: ValidationError, prefix: str, model: type[BaseModel] | None) -> list[str]:
    """One line per error: the key, the value and what is allowed."""
    return [describe(e, prefix, model) for e in exc.errors(include_url=False)]


def section(raw: Mapping[str, Any], key: str, model: type[M], origin: str = "params.yaml") -> M:
    """Validate one section (``key`` may be dotted: ``variants.gptq-w4g64``) into ``model``.

    A missing section takes the model's defaults.
    """
    value = _lookup(raw, key)
    try:
        return model.model_validate({} if value is None else value)
    except ValidationError as exc:
        lines = describe_errors(exc, key, model)
        raise ConfigError(f"{origin} is not valid:\n  " + "\n  ".join(lines)) from None


def overlay(base: M, overrides: Mapping[str, Any], key: str, origin: str = "params.yaml") -> M:
    """``base`` with ``overrides`` laid over it and validated again (a bench pair's own engine
    settings over its engine's); ``key`` names where the overrides come from in errors."""
    if not overrides:
        return base
    model = type(base)
    try:
        return model.model_validate({**base.model_dump(), **overrides})
    except ValidationError as exc:
        lines = describe_errors(exc, key, model)
        raise ConfigError(f"{origin} is not valid:\n  " + "\n  ".join(lines)) from None
