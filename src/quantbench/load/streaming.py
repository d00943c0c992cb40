"""Reading an OpenAI-compatible server-sent-event stream into a :class:`RequestRecord`.

Pure parsing, no network, so every server dialect can be tested with hand-written bytes:

* a stream ends with ``data: [DONE]`` (vLLM, llama-server) or just with the end of the body
  (``transformers serve``);
* chunks may carry no content: a role-only first chunk, a usage-only last chunk with empty
  ``choices``; the first token is the first chunk with non-empty content;
* usage may come in the last chunk (``stream_options.include_usage``), in every chunk
  (vLLM's continuous usage stats: then each chunk's token count is the growth of
  ``completion_tokens``), or not at all (the parent process counts with a tokenizer);
* an error may arrive as an event (``{"error": ...}`` or ``{"object": "error"}``).

What is not an answer fails with a reason, never passes as a completed request: an event of the
wrong shape (a string ``delta``, a number ``content``, ``choices`` that is not a list), a stream with
no content at all (only a role chunk, only usage, only ``[DONE]``), and a stream that ends without
``[DONE]`` and without a ``finish_reason`` (cut short: every engine seen sends one or the other).
"""

from __future__ import annotations

import json
from typing import Any

from quantbench.load.records import RequestRecord


class StreamError(Exception):
    """The server reported an error inside the stream, or sent something unreadable."""


def spread_unstreamed_tokens(record: RequestRecord) -> None:
    """Give the chunks the tokens the server counted in its usage but streamed no text for.

    A server generates some tokens its detokenizer never shows: special tokens (``transformers
    serve`` with a forced length keeps generating past EOS and skips them: a third of its tokens
    on the default run), or characters held back and sent merged. TPOT counts them (usage's
    ``completion_tokens``), so the window's token count must too, or output tokens/s of such a
    server reads low against its own TPOT and against other engines. They are spread evenly
    over the chunks, the best guess of when they were generated (a steady decode).
    """
    counted = sum(record.chunk_tokens)
    if record.output_tokens is None or not record.chunk_tokens or record.output_tokens <= counted:
        return
    extra, n = record.output_tokens - counted, len(record.chunk_tokens)
    for i in range(n):
        record.chunk_tokens[i] += extra // n + (1 if i < extra % n else 0)


class StreamParser:
    """Feeds SSE lines, with their arrival times, into a record."""

    def __init__(self, record: RequestRecord, api: str) -> None:
        self.record = record
        self.chat = api == "chat"
        self.done = False
        self._data: list[bytes] = []
        self._data_time = 0.0
        self._text: list[str] = []
        self._usage_completion = 0

    def feed_line(self, line: bytes, t: float) -> None:
        """One line of the body (with or without its line ending), read at time ``t``."""
        line = line.rstrip(b"\r\n")
        if not line:
            self._dispatch()
            return
        if line.startswith(b":"):
            return  # SSE comment / keep-alive
        name, _, value = line.partition(b":")
        if name != b"data":
            return  # 'event:', 'id:', 'retry:' carry nothing we use
        if value.startswith(b" "):
            value = value[1:]
        if not self._data:
            self._data_time = t
        self._data.append(value)

    def finish(self) -> None:
        """The body ended: flush an event that had no blank line after it, and judge the whole:
        StreamError for an empty stream or one cut short."""
        self._dispatch()
        self.record.output_text = "".join(self._text)
        spread_unstreamed_tokens(self.record)
        if not self.record.chunk_times:
            raise StreamError(
                "empty stream: HTTP 200 but no content"
                + (" (a finish_reason, no token)" if self.record.finish_reason else "")
            )
        if not self.done and self.record.finish_reason is None:
            raise StreamError(
                f"stream cut short: it ended after {len(self.record.chunk_times)} chunks without "
                "[DONE] or a finish_reason"
            )

    def _dispatch(self) -> None:
        if not self._data:
            return
        data = b"\n".join(self._data)
        t = self._data_time
        self._data = []
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            raise StreamError(f"unreadable event: {data[:200]!r}") from None
        if not isinstance(event, dict):
            raise StreamError(f"event is not a JSON object: {data[:200]!r}")
        try:
            self._take(event, t)
        except StreamError:
            raise
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            raise StreamError(f"malformed event ({exc}): {data[:200]!r}") from None

    def _take(self, event: dict[str, Any], t: float) -> None:
        if "error" in event or event.get("object") == "error":
            err = event.get("error", event)
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise StreamError(f"server error in stream: {msg}")
        rec = self.record
        text = ""
        choices = event.get("choices")
        if choices is None:
            choices = []
        if not isinstance(choices, list):
            raise StreamError(f"malformed event: 'choices' is a {type(choices).__name__}")
        if choices:
            choice = choices[0]
            if not isinstance(choice, dict):
                raise StreamError(f"malformed event: a choice is a {type(choice).__name__}")
            if self.chat:
                delta = choice.get("delta")
                if delta is None:
                    delta = {}
                if not isinstance(delta, dict):
                    raise StreamError(f"malformed event: 'delta' is a {type(delta).__name__}")
                # Reasoning models stream their thinking first; it is output all the same.
                parts = [delta.get(k) for k in ("content", "reasoning_content", "reasoning")]
            else:
                parts = [choice.get("text")]
            for part in parts:
                if part is not None and not isinstance(part, str):
                    raise StreamError(
                        f"malformed event: content is a {type(part).__name__}, not text"
                    )
            text = "".join(p for p in parts if p)
            if choice.get("finish_reason"):
                rec.finish_reason = str(choice["finish_reason"])
        usage = event.get("usage")
        n_tokens = 1
        timings = event.get("timings")
        if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
            rec.cached_tokens = int(timings["cache_n"])  # llama-server
        if isinstance(timings, dict) and isinstance(timings.get("draft_n"), int):
            # llama-server with speculative decoding (absent when the draft proposed nothing)
            rec.draft_tokens = int(timings["draft_n"])
            accepted = timings.get("draft_n_accepted")
            rec.draft_accepted = int(accepted) if isinstance(accepted, int) else None
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                rec.cached_tokens = int(details["cached_tokens"])
            if usage.get("prompt_tokens") is not None:
                rec.prompt_tokens = int(usage["prompt_tokens"])
            completion = usage.get("completion_tokens")
            if completion is not None:
                completion = int(completion)
                if text and completion > self._usage_completion:
                    n_tokens = completion - self._usage_completion
                self._usage_completion = max(self._usage_completion, completion)
                rec.output_tokens = completion
                rec.tokens_source = "usage"
        if text:
            if rec.first_token_time is None:
                rec.first_token_time = t
            rec.chunk_times.append(t)
            rec.chunk_tokens.append(n_tokens)
            self._text.append(text)
