"""Request profiles by name: 'openai' (any OpenAI-compatible server), 'mock' (``quantbench
mock-server``) and each registered engine's.

Apart from ``load.requests`` so that the profile type, which the engines and the mock server
declare theirs with, imports neither of them: no import cycle.
"""

from __future__ import annotations

from quantbench.engines.registry import engine_names, get_engine
from quantbench.errors import UserError
from quantbench.load.requests import GENERIC, RequestProfile


def profile_names() -> list[str]:
    """Every profile name ``get_profile`` accepts: 'openai', 'mock' and each engine's."""
    return ["openai", "mock", *engine_names()]


def get_profile(name: str) -> RequestProfile:
    """'openai', 'mock' or the name of a registered engine."""
    if name == GENERIC.name:
        return GENERIC
    if name == "mock":
        from quantbench.mock_server import PROFILE  # aiohttp: only when asked for

        return PROFILE
    try:
        return get_engine(name).profile
    except UserError:
        raise ValueError(
            f"unknown server profile {name!r}; choose one of {', '.join(profile_names())}"
        ) from None
