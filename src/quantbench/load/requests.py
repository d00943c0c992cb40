"""Request bodies: which optional fields a server accepts (its profile), and the body built from it.

Servers differ in what they tolerate: vLLM takes ``ignore_eos``, ``min_tokens`` and
``stream_options``; llama-server takes ``ignore_eos``; ``transformers serve`` answers HTTP 422 to any
field it does not know, but takes a ``generation_config`` (a JSON string that replaces the model's
generation config: an ``eos_token_id`` of -1 means EOS never stops the answer before
``max_new_tokens``). A generic OpenAI-compatible server gets only the standard ``stream_options``.

Each engine declares its profile in its own module (``quantbench.engines.<engine>``); this module
holds the generic one (``quantbench.load.profiles`` finds any of them by name). It imports nothing heavy: the load harness uses it.
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


def endpoint_path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def turn_body(
    rules: Any,
    *,
    api: str,
    max_tokens: int,
    messages: list[dict[str, Any]] | None = None,
    prompt: str | None = None,
) -> dict[str, Any]:
    """The JSON body of one streaming request, by the plan's body rules (``BodyRules``)."""
    body: dict[str, Any] = {"model": rules.model, "stream": True, "max_tokens": max_tokens}
    if api == "chat":
        body["messages"] = messages or []
    else:
        body["prompt"] = prompt or ""
    body.update(rules.stream_usage)
    if rules.fixed_output_length:
        if not rules.fixed_length:
            raise ValueError(
                f"server profile {rules.profile!r} has no request field that forces the output "
                "length; set fixed_output_length to false, or pick the engine's profile (vllm, "
                "llamacpp), or pass the engine's own field through request_fields"
            )
        if "ignore_eos" in rules.fixed_length:
            body["ignore_eos"] = True
        if "min_tokens" in rules.fixed_length:
            body["min_tokens"] = max_tokens
        if "generation_config" in rules.fixed_length:
            # transformers serve: EOS id -1 disables the stop at EOS, per request, in both its
            # plain and its continuous-batching path (min_new_tokens is ignored by the latter,
            # which builds one logits processor for all requests from the first one's config).
            config = {"max_new_tokens": max_tokens, "eos_token_id": -1, "do_sample": False}
            body["generation_config"] = json.dumps(config)
    body.update(rules.request_fields)
    return body


def body_rules(
    *,
    model: str,
    profile: RequestProfile,
    fixed_output_length: bool,
    request_fields: dict[str, Any],
) -> Any:
    from quantbench.load.plan import BodyRules

    return BodyRules(
        model=model,
        profile=profile.name,
        stream_usage=dict(profile.stream_usage),
        fixed_length=tuple(profile.fixed_length),
        fixed_output_length=fixed_output_length,
        request_fields=dict(request_fields),
    )


def build_body(
    item: PromptItem,
    *,
    api: str,
    model: str,
    profile: RequestProfile,
    fixed_output_length: bool,
    request_fields: dict[str, Any],
) -> dict[str, Any]:
    """The JSON body of one single-turn request for ``item``."""
    rules = body_rules(
        model=model,
        profile=profile,
        fixed_output_length=fixed_output_length,
        request_fields=request_fields,
    )
    if api == "chat":
        return turn_body(rules, api=api, max_tokens=item.max_tokens, messages=item.as_messages())
    return turn_body(rules, api=api, max_tokens=item.max_tokens, prompt=item.as_prompt())
