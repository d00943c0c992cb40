"""Request bodies: which optional fields a server accepts (its profile), and the body built from it.

Servers differ in what they tolerate: vLLM takes ``ignore_eos``, ``min_tokens`` and
``stream_options``; llama-server takes ``ignore_eos``; ``transformers serve`` answers HTTP 422 to any
field it does not know, but takes a ``generation_config`` (a JSON string that replaces the model's
generation config: ``min_new_tokens`` equal to ``max_new_tokens`` suppresses EOS until the length
is reached). A generic OpenAI-compatible server gets only the standard ``stream_options``.

Each engine declares its profile in its own module (``quantbench.engines.<engine>``); this module
holds the generic one and the lookup by name. It imports nothing heavy: the load harness uses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from quantbench.load.prompts import PromptItem


@dataclass(frozen=True)
class RequestProfile:
    """Optional request fields one kind of server understands."""

    name: str
    stream_usage: dict[str, Any]
    """Fields that make the server report token usage at the end of a stream."""
    fixed_length: tuple[str, ...]
    """How to force the output length: 'ignore_eos', 'min_tokens' and/or 'generation_config';
    empty if impossible."""


GENERIC = RequestProfile("openai", {"stream_options": {"include_usage": True}}, ())


def profile_names() -> list[str]:
    """Every profile name ``get_profile`` accepts: 'openai', 'mock' and each engine's."""
    from quantbench.engines.registry import engine_names

    return ["openai", "mock", *engine_names()]


def get_profile(name: str) -> RequestProfile:
    """'openai' (any OpenAI-compatible server), 'mock' (``quantbench mock-server``) or the name
    of a registered engine."""
    if name == GENERIC.name:
        return GENERIC
    if name == "mock":
        from quantbench.mock_server import PROFILE

        return PROFILE
    from quantbench.engines.registry import get_engine
    from quantbench.errors import UserError

    try:
        return get_engine(name).profile
    except UserError:
        raise ValueError(
            f"unknown server profile {name!r}; choose one of {', '.join(profile_names())}"
        ) from None


def endpoint_path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def build_body(
    item: PromptItem,
    *,
    api: str,
    model: str,
    profile: RequestProfile,
    fixed_output_length: bool,
    request_fields: dict[str, Any],
) -> dict[str, Any]:
    """The JSON body of one streaming request."""
    body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": item.max_tokens}
    if api == "chat":
        body["messages"] = item.as_messages()
    else:
        body["prompt"] = item.as_prompt()
    body.update(profile.stream_usage)
    if fixed_output_length:
        if not profile.fixed_length:
            raise ValueError(
                f"server profile {profile.name!r} has no request field that forces the output "
                "length; set fixed_output_length to false, or pick the engine's profile (vllm, "
                "llamacpp), or pass the engine's own field through request_fields"
            )
        if "ignore_eos" in profile.fixed_length:
            body["ignore_eos"] = True
        if "min_tokens" in profile.fixed_length:
            body["min_tokens"] = item.max_tokens
        if "generation_config" in profile.fixed_length:
            # min_new_tokens = max_new_tokens: EOS is suppressed until the length is reached.
            config = {
                "max_new_tokens": item.max_tokens,
                "min_new_tokens": item.max_tokens,
                "do_sample": False,
            }
            body["generation_config"] = json.dumps(config)
    body.update(request_fields)
    return body
