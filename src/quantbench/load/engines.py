"""Which optional request fields each engine accepts, and the request bodies built from them.

Engines differ in what they tolerate: vLLM takes ``ignore_eos``, ``min_tokens`` and
``stream_options``; llama.cpp's llama-server takes ``ignore_eos``; ``transformers serve`` answers
HTTP 422 to any field it does not know, but takes a ``generation_config`` (a JSON string that
replaces the model's generation config): ``min_new_tokens`` equal to ``max_new_tokens`` suppresses
EOS until the length is reached, which fixes the output length. A generic OpenAI-compatible server gets only the standard
``stream_options``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from quantbench.load.prompts import PromptItem

EngineName = Literal["openai", "vllm", "llamacpp", "transformers", "fake"]
ENGINES: tuple[str, ...] = ("openai", "vllm", "llamacpp", "transformers", "fake")


@dataclass(frozen=True)
class EngineProfile:
    """Optional fields one engine understands."""

    name: str
    stream_usage: dict[str, Any]
    """Fields that make the engine report token usage at the end of a stream."""
    fixed_length: tuple[str, ...]
    """How to force the output length: 'ignore_eos', 'min_tokens' and/or 'generation_config';
    empty if impossible."""


PROFILES: dict[str, EngineProfile] = {
    "openai": EngineProfile("openai", {"stream_options": {"include_usage": True}}, ()),
    "vllm": EngineProfile(
        "vllm", {"stream_options": {"include_usage": True}}, ("ignore_eos", "min_tokens")
    ),
    "llamacpp": EngineProfile(
        "llamacpp", {"stream_options": {"include_usage": True}}, ("ignore_eos",)
    ),
    # transformers serve rejects unknown fields with 422 and sends usage on its own.
    "transformers": EngineProfile("transformers", {}, ("generation_config",)),
    "fake": EngineProfile(
        "fake", {"stream_options": {"include_usage": True}}, ("ignore_eos", "min_tokens")
    ),
}


def get_profile(engine: str) -> EngineProfile:
    try:
        return PROFILES[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}") from None


def endpoint_path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def build_body(
    item: PromptItem,
    *,
    api: str,
    model: str,
    profile: EngineProfile,
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
                f"engine {profile.name!r} has no request field that forces the output length; "
                "set fixed_output_length to false, or pick the engine's profile (vllm, llamacpp), "
                "or pass the engine's own field through request_fields"
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
