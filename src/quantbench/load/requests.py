"""Request bodies: which optional fields a server accepts (its profile), and the body built from it.

Servers differ in what they tolerate: vLLM takes ``ignore_eos``, ``min_tokens`` and
``stream_options``; llama-server takes ``ignore_eos``; ``transformers serve`` answers HTTP 422 to any
field it does not know, but takes a ``generation_config`` (a JSON string that replaces the model's
generation config: an ``eos_token_id`` of -1 means EOS never stops the answer before
``max_new_tokens``). A generic OpenAI-compatible server gets only the standard ``stream_options``.

Each engine declares its profile in its own module (``quantbench.engines.<engine>``); this module
holds the generic one and that of the harness's own scripted server (``quantbench.mock_server``);
``quantbench.load.profiles`` finds any of them by name. It imports nothing heavy: the load
harness uses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from quantbench.errors import UserError
from quantbench.workloads.plan import BodyRules
from quantbench.workloads.prompts import PromptItem


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
# The scripted server (quantbench.mock_server) honours vLLM's optional fields.
MOCK = RequestProfile(
    "mock", {"stream_options": {"include_usage": True}}, ("ignore_eos", "min_tokens")
)


# Request fields that force an answer's length on some server: a user's own request_fields
# holding one honour a fixed output length where the profile knows none.
LENGTH_FIELDS = ("ignore_eos", "min_tokens", "generation_config")


class UnforceableLengthError(UserError):
    """A fixed output length was asked of a server whose request profile cannot force one."""


def check_fixed_length(
    profile: RequestProfile, fixed_output_length: bool, request_fields: dict[str, Any]
) -> None:
    """Refuse, before any request, a fixed output length the server cannot be asked for: the
    profile has no field for it and the user's request_fields carry none. (Every request would
    otherwise fail alike and nothing be measured.)"""
    if not fixed_output_length or profile.fixed_length:
        return
    if any(key in request_fields for key in LENGTH_FIELDS):
        return
    raise UnforceableLengthError(
        f"a fixed output length cannot be asked of server profile {profile.name!r}: a plain "
        "OpenAI-compatible server has no request field that forces it. Name an engine whose "
        "request profile has one (--engine NAME, see `quantbench load --help`; in params, the "
        "pair's engine: every built-in engine's has), pass the server's own field "
        "(--request-field ignore_eos=true; request_fields), or let answers end early "
        "(--no-fixed-output-length; fixed_output_length: false)"
    )


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
        # body_rules refused a length it cannot force; the user's request_fields force it
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
    check_fixed_length(profile, fixed_output_length, request_fields)
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
