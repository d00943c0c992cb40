"""Reading params.yaml: the file, its plugins, and one section at a time.

Stages read only the sections they use (so a stage's code dependencies stay its own, see
docs/ARCHITECTURE.md); `quantbench validate` reads them all through :mod:`quantbench.config`.
Reading refuses what YAML lets through silently: an empty file, a key written twice (YAML keeps the
last one), a top level that is not a mapping. Values YAML reads as something the user probably did
not mean (``on``/``off``/``yes``/``no`` become booleans) are named in the messages of the settings
that receive them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from quantbench.errors import UserError
from quantbench.textfile import read_utf8

DEFAULT_PARAMS = Path("params.yaml")
M = TypeVar("M", bound=BaseModel)


class ConfigError(UserError):
    """params.yaml is missing, unreadable or holds values that are not allowed."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a mapping key written twice."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
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


def parse_yaml(text: str, origin: str = "params.yaml") -> dict[str, Any]:
    """The mapping in ``text``; ConfigError for an empty file, bad YAML or a repeated key."""
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML: {exc}") from None
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
    shown = repr(value) if not isinstance(value, dict) else "{...}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if not loc and kind == "value_error":  # a check across fields: its message says it all
        return f"{prefix}: {message}" if prefix else message
    if kind == "literal_error":
        message = message.replace("Input should be", "allowed:")
    if isinstance(value, bool) and kind in ("literal_error", "string_type", "enum"):
        message += (
            f"; YAML reads an unquoted {_YAML_BOOLEANS[value]} as {str(value).lower()}: "
            "quote the word (e.g. 'on')"
        )
    return f"{key}: got {shown}; {message}"


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
