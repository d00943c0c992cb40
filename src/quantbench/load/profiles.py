"""Request profiles by name: the generic one ('openai'), the harness's own scripted server's
('mock'), and each engine's, registered with the engine.

The harness knows no engine by name: ``quantbench.engines.registry.register_engine`` registers an
engine's profile here, so a profile is known once its engine is loaded (the bench stages and
``quantbench load --engine NAME`` load it before they ask). The engines build on the harness,
never the other way round (tools/layers.py).
"""

from __future__ import annotations

from quantbench.load.requests import GENERIC, MOCK, RequestProfile

_PROFILES: dict[str, RequestProfile] = {GENERIC.name: GENERIC, MOCK.name: MOCK}


def register_profile(profile: RequestProfile) -> RequestProfile:
    """Make ``profile`` known by its name (a second one of that name replaces it)."""
    _PROFILES[profile.name] = profile
    return profile


def profile_names() -> list[str]:
    """Every profile name ``get_profile`` knows now: 'openai', 'mock' and each loaded engine's."""
    return list(_PROFILES)


def get_profile(name: str) -> RequestProfile:
    """The profile registered under ``name``."""
    try:
        return _PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown server profile {name!r}; known now: {', '.join(profile_names())} (an "
            "engine's profile is known once its engine is loaded: "
            "quantbench.engines.registry.get_engine)"
        ) from None
