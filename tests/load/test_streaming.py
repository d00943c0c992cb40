"""The SSE parser against the dialects of real engines, with hand-written bytes."""

from __future__ import annotations

import json

import pytest

from quantbench.load.records import RequestRecord
from quantbench.load.streaming import StreamError, StreamParser


def _rec() -> RequestRecord:
    return RequestRecord(
        request_id="r", index=0, point="pt", scenario="s", prompt_id="p", phase="measured",
        worker=0, send_time=100.0,
    )  # fmt: skip


def _chat(content: str | None, **extra: object) -> bytes:
    delta = {} if content is None else {"content": content}
    return b"data: " + json.dumps({"choices": [{"delta": delta}], **extra}).encode() + b"\n"


def _feed(parser: StreamParser, lines: list[tuple[bytes, float]]) -> None:
    for line, t in lines:
        parser.feed_line(line, t)


def test_vllm_style_stream_with_role_chunk_usage_chunk_and_done() -> None:
    rec = _rec()
    p = StreamParser(rec, "chat")
    usage = {"prompt_tokens": 7, "completion_tokens": 2}
    _feed(p, [
        (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n', 100.01),
        (b"\n", 100.01),
        (_chat("Hel"), 100.10), (b"\n", 100.10),
        (_chat("lo"), 100.15), (b"\n", 100.15),
        (b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n', 100.16), (b"\n", 100.16),
        (b'data: {"choices":[],"usage":' + json.dumps(usage).encode() + b"}\n", 100.17),
        (b"\n", 100.17),
        (b"data: [DONE]\n", 100.18), (b"\n", 100.18),
    ])  # fmt: skip
    p.finish()
    assert p.done
    assert rec.first_token_time == 100.10  # the role-only chunk is not the first token
    assert rec.chunk_times == [100.10, 100.15]
    assert rec.chunk_tokens == [1, 1]
    assert (rec.prompt_tokens, rec.output_tokens, rec.tokens_source) == (7, 2, "usage")
    assert rec.finish_reason == "length"
    assert rec.output_text == "Hello"


def test_stream_ending_without_done_and_without_trailing_blank_line() -> None:
    rec = _rec()
    p = StreamParser(rec, "chat")
    last = b'data: {"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}],' \
        b'"usage":{"completion_tokens":2}}\n'  # fmt: skip
    _feed(p, [(_chat("a"), 1.0), (b"\n", 1.0), (last, 2.0)])
    p.finish()  # the body ended: the pending event is flushed; its finish_reason ends the answer
    assert not p.done
    assert rec.chunk_times == [1.0, 2.0]
    assert rec.output_tokens == 2 and rec.finish_reason == "stop"


def _done(p: StreamParser, t: float) -> None:
    _feed(p, [(b"data: [DONE]\n", t), (b"\n", t)])


def test_continuous_usage_gives_tokens_per_chunk() -> None:
    rec = _rec()
    p = StreamParser(rec, "chat")
    for i, (text, total) in enumerate([("a", 1), ("bcd", 4), ("e", 5)]):
        p.feed_line(_chat(text, usage={"prompt_tokens": 3, "completion_tokens": total}), float(i))
        p.feed_line(b"\n", float(i))
    _done(p, 3.0)
    p.finish()
    assert rec.chunk_tokens == [1, 3, 1]
    assert rec.output_tokens == 5


def test_tokens_the_server_counted_but_did_not_stream_are_given_to_the_chunks() -> None:
    """transformers serve under a forced length generates past EOS and streams no text for the
    special tokens (a third of them on the default run): usage says 7, three chunks came. The
    window's token count must be what TPOT counts, spread over the chunks."""
    rec = _rec()
    p = StreamParser(rec, "chat")
    for i, text in enumerate(["a", "b", "c"]):
        p.feed_line(_chat(text), float(i))
        p.feed_line(b"\n", float(i))
    usage = {"prompt_tokens": 3, "completion_tokens": 7}
    p.feed_line(b'data: {"choices":[],"usage":' + json.dumps(usage).encode() + b"}\n", 3.0)
    p.feed_line(b"\n", 3.0)
    _done(p, 3.1)
    p.finish()
    assert rec.output_tokens == 7
    assert sum(rec.chunk_tokens) == 7
    assert rec.chunk_tokens == [3, 2, 2]


def test_a_stream_that_shows_every_token_keeps_one_per_chunk() -> None:
    rec = _rec()
    p = StreamParser(rec, "chat")
    for i, text in enumerate(["a", "b"]):
        p.feed_line(_chat(text), float(i))
        p.feed_line(b"\n", float(i))
    p.feed_line(b'data: {"choices":[],"usage":{"completion_tokens":2}}\n', 2.0)
    p.feed_line(b"\n", 2.0)
    _done(p, 2.1)
    p.finish()
    assert rec.chunk_tokens == [1, 1]


def test_completions_text_and_crlf_and_comments() -> None:
    rec = _rec()
    p = StreamParser(rec, "completions")
    _feed(p, [
        (b": keep-alive\r\n", 0.5), (b"event: message\r\n", 0.9),
        (b'data: {"choices":[{"text":" x"}]}\r\n', 1.0), (b"\r\n", 1.0),
        (b'data: {"choices":[{"text":""}]}\r\n', 1.5), (b"\r\n", 1.5),
        (b'data: {"choices":[{"text":" y"}]}\r\n', 2.0), (b"\r\n", 2.0),
        (b"data: [DONE]\r\n", 2.1), (b"\r\n", 2.1),
    ])  # fmt: skip
    p.finish()
    assert rec.chunk_times == [1.0, 2.0]
    assert rec.output_text == " x y"


def test_multi_line_data_event_is_joined() -> None:
    rec = _rec()
    p = StreamParser(rec, "completions")
    _feed(p, [(b'data: {"choices":\n', 1.0), (b'data: [{"text":"z"}]}\n', 1.1), (b"\n", 1.1)])
    _done(p, 1.2)
    p.finish()
    assert rec.chunk_times == [1.0]  # stamped when the event's first line arrived
    assert rec.output_text == "z"


def test_reasoning_content_counts_as_output() -> None:
    rec = _rec()
    p = StreamParser(rec, "chat")
    p.feed_line(b'data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}\n', 3.0)
    p.feed_line(b"\n", 3.0)
    assert rec.first_token_time == 3.0


@pytest.mark.parametrize(
    "event",
    [b'{"error":{"message":"out of memory"}}', b'{"object":"error","message":"out of memory"}'],
)
def test_error_event_raises_with_the_message(event: bytes) -> None:
    p = StreamParser(_rec(), "chat")
    p.feed_line(b"data: " + event + b"\n", 1.0)
    with pytest.raises(StreamError, match="out of memory"):
        p.feed_line(b"\n", 1.0)


def test_unreadable_event_raises() -> None:
    p = StreamParser(_rec(), "chat")
    p.feed_line(b"data: {not json\n", 1.0)
    with pytest.raises(StreamError, match="unreadable event"):
        p.feed_line(b"\n", 1.0)


# -- issue 14, item 7: broken streams used to count as completed ---------------------------


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        # a 200 with only a role chunk, then [DONE]
        ([b'data: {"choices":[{"delta":{"role":"assistant"}}]}', b"data: [DONE]"], "empty stream"),
        ([b"data: [DONE]"], "empty stream"),
        ([b'data: {"choices":[],"usage":{"completion_tokens":0}}'], "empty stream"),
        # tokens, then the body ends: no [DONE], no finish_reason
        ([b'data: {"choices":[{"delta":{"content":"a"}}]}'], "cut short"),
    ],
)
def test_streams_without_an_answer_fail(lines: list[bytes], reason: str) -> None:
    rec = _rec()
    p = StreamParser(rec, "chat")
    for line in lines:
        _feed(p, [(line + b"\n", 1.0), (b"\n", 1.0)])
    with pytest.raises(StreamError, match=reason):
        p.finish()


@pytest.mark.parametrize(
    "event",
    [
        b'{"choices":[{"delta":"hello"}]}',  # a string delta
        b'{"choices":[{"delta":{"content":42}}]}',  # numeric content
        b'{"choices":{"delta":{}}}',  # choices not a list
        b'{"choices":["x"]}',
        b"[1, 2]",
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":"many"}}',
    ],
)
def test_events_of_the_wrong_shape_fail_with_a_reason(event: bytes) -> None:
    p = StreamParser(_rec(), "chat")
    p.feed_line(b"data: " + event + b"\n", 1.0)
    with pytest.raises(StreamError, match="malformed|not a JSON object"):
        p.feed_line(b"\n", 1.0)


def test_load_process_modules_import_no_model_library() -> None:
    """Locust's gevent patching and a model library's threads must not share a process."""
    import subprocess
    import sys

    code = (
        "import sys, quantbench.load.runner, quantbench.load.locustfile;"
        "bad = [m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("last", "cached"),
    [
        # vLLM with --enable-prompt-tokens-details
        ({"choices": [], "usage": {"prompt_tokens": 300, "completion_tokens": 1,
                                   "prompt_tokens_details": {"cached_tokens": 288}}}, 288),
        # llama-server's own timings
        ({"choices": [{"delta": {}, "finish_reason": "length"}],
          "timings": {"cache_n": 250, "prompt_n": 50}}, 250),
        # an engine that says nothing about its cache
        ({"choices": [], "usage": {"prompt_tokens": 300, "completion_tokens": 1}}, None),
    ],
    ids=["vllm", "llama-server", "silent"],
)  # fmt: skip
def test_what_the_prefix_cache_served_is_read_from_either_dialect(last: dict, cached) -> None:
    rec = _rec()
    p = StreamParser(rec, "chat")
    _feed(p, [(_chat("Hi"), 100.1), (b"\n", 100.1),
              (b"data: " + json.dumps(last).encode() + b"\n", 100.2), (b"\n", 100.2),
              (b"data: [DONE]\n", 100.3), (b"\n", 100.3)])  # fmt: skip
    p.finish()
    assert rec.cached_tokens == cached


@pytest.mark.parametrize(
    ("timings", "expected"),
    [
        # llama-server with a draft model or n-gram lookup: its last chunk's timings say
        ({"cache_n": 0, "predicted_n": 32, "draft_n": 40, "draft_n_accepted": 26}, (40, 26)),
        # speculation on but nothing drafted: llama-server leaves the fields out
        ({"cache_n": 0, "predicted_n": 32}, (None, None)),
    ],
    ids=["drafted", "nothing-drafted"],
)
def test_speculative_decoding_s_draft_counts_are_recorded(timings: dict, expected) -> None:
    # The acceptance rate decides whether a draft model pays; the harness threw it away.
    rec = _rec()
    p = StreamParser(rec, "chat")
    last = {"choices": [{"delta": {}, "finish_reason": "length"}], "timings": timings}
    _feed(p, [(_chat("Hi"), 100.1), (b"\n", 100.1),
              (b"data: " + json.dumps(last).encode() + b"\n", 100.2), (b"\n", 100.2),
              (b"data: [DONE]\n", 100.3), (b"\n", 100.3)])  # fmt: skip
    p.finish()
    assert (rec.draft_tokens, rec.draft_accepted) == expected
