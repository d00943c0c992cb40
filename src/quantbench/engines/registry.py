"""Engines by name: the built-in ones (imported when first asked for) and plugins' (registered).

An engine module ends with ``register_engine(MyEngine())``. The built-in engines are imported
lazily by name, so code that needs one engine (a bench stage) imports only that engine's module;
``all_engines()`` imports every built-in one (config validation, ``quantbench pairs``). A plugin
registers its engines when params.yaml's ``plugins:`` imports it (docs/EXTENDING.md).

Who serves what is the engines' to declare (``Engine.formats``); a plugin format that an engine
it does not define serves adds itself to that engine's with :func:`also_serves`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from quantbench.errors import UserError
from quantbench.load.profiles import register_profile
from quantbench.load.requests import RequestProfile
from quantbench.params import section

if TYPE_CHECKING:
    from quantbench.engines.base import Engine, EngineEnvironment, EngineSettings

# name -> module that registers it when imported
BUILTIN: dict[str, str] = {
    "transformers": "quantbench.engines.transformers",
    "vllm": "quantbench.engines.vllm",
    "llamacpp": "quantbench.engines.llamacpp",
}
_REGISTERED: dict[str, Engine] = {}
# engine name -> formats a plugin added to those its ``formats`` declare (also_serves)
_ALSO_SERVES: dict[str, set[str]] = {}


def register_engine(engine: Engine) -> Engine:
    """Make ``engine`` known by its name (a second registration of one name replaces it)."""
    # what the registry reads of an engine, checked as such: engines.base imports this module
    # (Engine.serves asks served_formats), so this one does not import engines.base
    if not isinstance(getattr(engine, "name", None), str) or not isinstance(
        getattr(engine, "profile", None), RequestProfile
    ):
        raise TypeError(
            "register_engine takes an Engine instance (a name and a request profile), got "
            f"{type(engine).__name__}"
        )
    _REGISTERED[engine.name] = engine
    # the load harness finds the engine's request profile by name (Target.engine)
    register_profile(engine.profile)
    return engine


def engine_names() -> list[str]:
    """Built-in engines first, then plugins', in registration order."""
    return [*BUILTIN, *(n for n in _REGISTERED if n not in BUILTIN)]


def get_engine(name: str) -> Engine:
    if name not in _REGISTERED and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    if name not in _REGISTERED:
        raise UserError(f"unknown engine {name!r}; known engines: {', '.join(engine_names())}")
    return _REGISTERED[name]


def all_engines() -> dict[str, Engine]:
    return {name: get_engine(name) for name in engine_names()}


def also_serves(engine: str, *formats: str) -> None:
    """Declare that engine ``engine`` (built in, or a plugin's) serves ``formats`` besides those
    its ``formats`` declare: how a plugin format that an engine it does not define serves (an HF
    checkpoint transformers loads as it is) says so from its own module, no engine edited. The
    engine need not be imported yet."""
    _ALSO_SERVES.setdefault(engine, set()).update(formats)


def served_formats(engine: Engine) -> frozenset[str]:
    """Every format ``engine`` serves: its ``formats``, and those plugins added (also_serves).
    The one answer to who serves what (``Engine.serves``, :func:`engines_for`)."""
    return engine.formats | _ALSO_SERVES.get(engine.name, set())


def engines_for(fmt: str) -> list[str]:
    """The engines that serve format ``fmt``, built-in ones first."""
    return [name for name, engine in all_engines().items() if engine.serves(fmt)]


def check_pair(variant: str, fmt: str, engine: str) -> None:
    """Refuse an impossible pair, saying which engines do serve that format."""
    if not get_engine(engine).serves(fmt):
        raise UserError(
            f"engine {engine!r} cannot serve variant {variant!r} (format {fmt}); "
            f"engines that serve {fmt}: {', '.join(engines_for(fmt)) or 'none'}"
        )


def unservable_here(pair: str, variant: str, fmt: str, engine: str, settings: Any) -> str | None:
    """Why pair ``pair`` cannot run on this machine although its engine serves the format (the
    engine's :meth:`~quantbench.engines.base.Engine.unservable_here`), naming the engines that
    also serve it; None where it can."""
    why = get_engine(engine).unservable_here(fmt, settings)
    if why is None:
        return None
    others = [e for e in engines_for(fmt) if e != engine]
    instead = (
        f"serve {variant} with {' or '.join(others)} here (bench.pairs.{variant}-{others[0]}), "
        if others
        else ""
    )
    return f"bench.pairs.{pair}: {why}; {instead}or run this pair on a machine where {engine} can"


def engine_settings(name: str, raw: Any) -> EngineSettings:
    """Validate one engine's section with that engine's settings model."""
    return get_engine(name).settings_model.model_validate({} if raw is None else raw)


def engine_environments(params: Mapping[str, Any]) -> dict[str, EngineEnvironment]:
    """Each enabled engine's environment of its own (``Engine.environment``), by engine name:
    what the fingerprint records and ``quantbench env`` creates."""

    out = {}
    for name, engine in all_engines().items():
        settings = section(params, f"engines.{name}", engine.settings_model)
        env = engine.environment(settings) if settings.enabled else None
        if env is not None:
            out[name] = env
    return out


def engine_kernels(params: Mapping[str, Any]) -> dict[str, BaseModel | None]:
    """Every engine's entries of env.json's ``kernels`` (``Engine.kernels``), enabled or not:
    which native kernels each engine's server picks on this machine, as the fingerprint records
    them."""

    out: dict[str, BaseModel | None] = {}
    for name, engine in all_engines().items():
        settings = section(params, f"engines.{name}", engine.settings_model)
        for key, found in engine.kernels(settings).items():
            if key in out:
                raise ValueError(f"engine {name!r} reports kernels entry {key!r} another did")
            out[key] = found
    return out


def valid_pairs(
    variant_formats: Mapping[str, str], settings: Mapping[str, EngineSettings]
) -> list[tuple[str, str]]:
    """Every (variant, engine) pair where the engine is enabled and serves the variant's format."""
    pairs = []
    for variant, fmt in variant_formats.items():
        for name, engine in all_engines().items():
            enabled = settings[name].enabled if name in settings else False
            if enabled and engine.serves(fmt):
                pairs.append((variant, name))
    return pairs


def smallest_context(engine_name: str, settings: EngineSettings) -> tuple[int, str] | None:
    """The fewest tokens one request may hold on this engine with these settings, over every
    point of their sweep, and the setting that says so (None where the engine sets no limit)."""
    engine = get_engine(engine_name)
    limits = []
    for label, point in settings.sweep_points():
        limit = engine.context_limit(point)
        if limit is not None:
            where = limit[1] + (f" (sweep point {label})" if label != "default" else "")
            limits.append((limit[0], where))
    return min(limits) if limits else None
