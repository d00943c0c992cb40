"""A scripted OpenAI-compatible streaming server: `quantbench mock-server`.

For people who test a client, a gateway or the harness itself (quantbench uses it to check that
its own load generator measures TTFT and ITL to the millisecond, and in its fault suite): it
answers like a real engine, but with timings and failures you choose. Every request gets a scripted behaviour (time to first token, output length, delays between
tokens, or a failure: an HTTP error, a stream closed half-way, an event that is not JSON, no
answer at all), taken round-robin
in arrival order from the script. The server logs the true time it wrote each chunk, so a test
can compare what the harness measured with what happened, free of the server's own scheduling
jitter; each entry also carries the longest the server's own event loop has woken late so far
(``loop_lag_max_ms``, checked every 10 ms), so a test can tell a delay of the harness from one of
a server that the machine did not run for a while, and the prompt tokens it counted (in words,
or with a tokenizer as an engine counts them: its ``usage.prompt_tokens``). Options mimic the
dialects of real engines: usage in the last chunk or not, a closing
``data: [DONE]`` or not, a role-only first chunk, HTTP 422 on unknown request fields
(``transformers serve``).

    quantbench mock-server --port 0 --script script.json --log truth.jsonl

prints ``listening on http://127.0.0.1:PORT`` once it accepts connections; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from quantbench.load.procs import spawn_module, stop_group
from quantbench.load.requests import MOCK
from quantbench.load.tokens import load_counter
from quantbench.workloads.prompts import PromptItem

LAG_TICK_S = 0.01  # how often the server times its own event loop's lateness

# What to send it: it honours vLLM's optional fields (ignore_eos, min_tokens, stream_options).
PROFILE = MOCK

STANDARD_FIELDS = frozenset(
    {"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "stream",
     "temperature", "top_p", "seed", "stop", "n", "user"}
)  # fmt: skip


class Behaviour(BaseModel):
    """What the server does with one request."""

    model_config = ConfigDict(extra="forbid")

    name: str = "default"
    ttft_ms: float | list[float] = Field(
        default=0.0, description="Delay before the first token; a list is cycled per request."
    )
    itl_ms: float | list[float] = Field(
        default=0.0, description="Delay before each further token; a list is cycled per token."
    )
    output_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Tokens to stream; None: max_tokens when the request forces the length "
        "(ignore_eos or min_tokens), else min(max_tokens, the script's default).",
    )
    ms_per_concurrent: float = Field(
        default=0.0,
        ge=0,
        description="Extra delay per token for each other stream in flight: a server that slows "
        "down under load, so SLO-edge searches have an edge to find.",
    )
    status: int = Field(default=200, description="Answer with this HTTP status and an error body.")
    close_after_tokens: int | None = Field(
        default=None, ge=0, description="Drop the connection after this many tokens."
    )
    hang: bool = Field(default=False, description="Never answer (until the client gives up).")
    malformed_after_tokens: int | None = Field(
        default=None,
        ge=0,
        description="After this many tokens, send an event that is not valid JSON, then go on.",
    )
    wrong_shape_after_tokens: int | None = Field(
        default=None,
        ge=0,
        description="After this many tokens, send valid JSON of the wrong shape (a string "
        "'delta'), then go on.",
    )
    stall_after_tokens: int | None = Field(
        default=None,
        ge=0,
        description="After this many tokens, send nothing more and keep the connection open.",
    )
    keepalive_ms: float | None = Field(
        default=None,
        gt=0,
        description="With stall_after_tokens: send an SSE comment every this many ms while "
        "stalled, so the connection is never idle (a stream that never ends).",
    )


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    behaviours: list[Behaviour] = Field(default_factory=lambda: [Behaviour()], min_length=1)
    model: str = "mock-model"
    default_output_tokens: int = Field(default=16, ge=0)
    usage: Literal["requested", "always", "never"] = Field(
        default="requested",
        description="Usage in the last chunk: when stream_options.include_usage asks, always "
        "(transformers serve), or never.",
    )
    done_marker: bool = Field(default=True, description="End streams with data: [DONE].")
    role_chunk: bool = Field(default=True, description="Send a role-only chunk first (chat).")
    strict_fields: bool = Field(
        default=False, description="HTTP 422 for fields outside the standard OpenAI ones."
    )
    strict_model: bool = Field(default=False, description="HTTP 404 unless model matches.")
    api_key: str | None = Field(
        default=None, description="HTTP 401 unless the request has 'Authorization: Bearer KEY'."
    )
    tokenizer: str | None = Field(
        default=None,
        description="Count usage.prompt_tokens with this tokenizer (a model folder: a chat "
        "request through its chat template, as an engine counts it; or a tokenizer.json), "
        "and log the count; default: words. A tokenization per request holds the event loop "
        "a millisecond or so: leave it off where timings are checked.",
    )
    answers: dict[str, str] = Field(
        default_factory=dict,
        description="Known answers: a chat request whose last user message is a key gets that "
        "text, a word a token (capped by max_tokens); any other request gets ' tok0 tok1 ...'.",
    )


def _cycled(value: float | list[float], i: int) -> float:
    if isinstance(value, list):
        return value[i % len(value)] if value else 0.0
    return value


def _last_user_message(body: dict[str, Any]) -> str | None:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content", ""))
    return None


def _words(body: dict[str, Any]) -> int:
    if isinstance(body.get("prompt"), str):
        return len(body["prompt"].split())
    return sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])


class MockServer:
    def __init__(self, script: Script, log: IO[str] | None) -> None:
        self.script = script
        self.counter: Any = None
        if script.tokenizer is not None:  # loaded once, before the server listens
            self.counter = load_counter(script.tokenizer)
        self.in_flight = 0
        self.log = log
        self.arrivals = 0
        self.per_behaviour: dict[int, int] = {}
        self.loop_lag_max_s = 0.0

    async def watch_loop_lag(self) -> None:
        """Keep the longest lateness of this event loop: a tick due every 10 ms, timed."""
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(LAG_TICK_S)
            late = loop.time() - before - LAG_TICK_S
            self.loop_lag_max_s = max(self.loop_lag_max_s, late)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_post("/v1/completions", self.handle)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    def _authorized(self, request: web.Request) -> bool:
        key = self.script.api_key
        return key is None or request.headers.get("Authorization") == f"Bearer {key}"

    async def models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": {"message": "missing or wrong API key"}}, status=401)
        return web.json_response(
            {"object": "list", "data": [{"id": self.script.model, "object": "model"}]}
        )

    def _write_log(self, entry: dict[str, Any]) -> None:
        if self.log is not None:
            entry["loop_lag_max_ms"] = round(self.loop_lag_max_s * 1000, 3)
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        arrival = time.monotonic()
        n = self.arrivals
        self.arrivals += 1
        b_index = n % len(self.script.behaviours)
        behaviour = self.script.behaviours[b_index]
        k = self.per_behaviour.get(b_index, 0)
        self.per_behaviour[b_index] = k + 1
        entry: dict[str, Any] = {
            "request_id": request.headers.get("X-Request-Id"),
            "arrival_index": n,
            "behaviour": behaviour.name,
            "arrival": arrival,
            "chunk_times": [],
        }
        if not self._authorized(request):
            return self._error(entry, 401, "missing or wrong API key")
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return self._error(entry, 400, "request body is not JSON")
        if not isinstance(body, dict):
            return self._error(entry, 400, "request body must be a JSON object")
        if self.script.strict_fields:
            unknown = sorted(set(body) - STANDARD_FIELDS)
            if unknown:
                return self._error(entry, 422, f"unknown fields: {unknown}")
        if self.script.strict_model and body.get("model") != self.script.model:
            return self._error(entry, 404, f"model {body.get('model')!r} is not served")
        if behaviour.hang:
            return await self._hang(request, entry)
        if behaviour.status != 200:
            return self._error(entry, behaviour.status, f"scripted failure ({behaviour.name})")
        if not body.get("stream"):
            return await self._whole(request, body, behaviour, k, entry)
        return await self._stream(request, body, behaviour, k, entry)

    def _error(self, entry: dict[str, Any], status: int, message: str) -> web.Response:
        entry.update(outcome="error", status=status, tokens=0)
        self._write_log(entry)
        return web.json_response(
            {"error": {"message": message, "type": "mock", "code": status}}, status=status
        )

    async def _hang(self, request: web.Request, entry: dict[str, Any]) -> web.Response:
        # Poll the connection: the handler is not cancelled when the client goes away.
        transport = request.transport
        while transport is not None and not transport.is_closing():
            await asyncio.sleep(0.02)
        entry.update(outcome="hung", status=None, tokens=0, end=time.monotonic())
        self._write_log(entry)
        return web.Response(status=499)

    async def _stall(
        self, request: web.Request, resp: web.StreamResponse, behaviour: Behaviour
    ) -> str:
        """Send nothing (or only keep-alive comments) until the client goes away."""
        transport = request.transport
        every = (behaviour.keepalive_ms or 0) / 1000
        last = time.monotonic()
        while transport is not None and not transport.is_closing():
            await asyncio.sleep(0.02)
            if every and time.monotonic() - last >= every:
                await resp.write(b": keep-alive\n\n")
                last = time.monotonic()
        return "stalled"

    def _prompt_tokens(self, body: dict[str, Any]) -> int:
        """The prompt's tokens as the script counts them: the tokenizer's, else words."""
        if self.counter is None:
            return _words(body)

        if isinstance(body.get("prompt"), str):
            return int(self.counter.count_prompt(PromptItem("p", 1, prompt=body["prompt"]), "text"))
        item = PromptItem("p", 1, messages=list(body.get("messages") or []))
        return int(self.counter.count_prompt(item, "chat"))

    def _n_tokens(self, body: dict[str, Any], behaviour: Behaviour) -> int:
        if behaviour.output_tokens is not None:
            return behaviour.output_tokens
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        if max_tokens is None:
            return self.script.default_output_tokens
        if body.get("ignore_eos") or body.get("min_tokens"):
            return int(max_tokens)
        return min(int(max_tokens), self.script.default_output_tokens)

    def _texts(self, body: dict[str, Any], n_tokens: int) -> list[str]:
        """What each token says: the script's known answer to the question, else tok0, tok1..."""
        answer = self.script.answers.get(_last_user_message(body) or "")
        if answer is None:
            return [f" tok{i}" for i in range(n_tokens)]
        words = [f" {w}" for w in answer.split()]
        cap = body.get("max_tokens") or body.get("max_completion_tokens")
        return words[: int(cap)] if cap else words

    async def _whole(
        self,
        request: web.Request,
        body: dict[str, Any],
        behaviour: Behaviour,
        k: int,
        entry: dict[str, Any],
    ) -> web.Response:
        """A request without ``stream``: the whole answer in one JSON body once its last token
        is due (lm-evaluation-harness asks this way)."""
        texts = self._texts(body, self._n_tokens(body, behaviour))
        delay = sum(
            _cycled(behaviour.ttft_ms, k) if i == 0 else _cycled(behaviour.itl_ms, i - 1)
            for i in range(len(texts))
        )
        await asyncio.sleep(delay / 1000)
        text = "".join(texts).strip()
        prompt = entry["prompt_tokens"] = self._prompt_tokens(body)
        usage = {"prompt_tokens": prompt, "completion_tokens": len(texts),
                 "total_tokens": prompt + len(texts)}  # fmt: skip
        entry.update(outcome="completed", status=200, tokens=len(texts), end=time.monotonic())
        entry["chunk_times"].append(entry["end"])
        self._write_log(entry)
        cid = f"fake-{entry['arrival_index']}"
        model = body.get("model", self.script.model)
        if request.path.endswith("/chat/completions"):
            choice: dict[str, Any] = {
                "index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": text},
            }  # fmt: skip
            obj = "chat.completion"
        else:
            choice = {"index": 0, "finish_reason": "stop", "text": text}
            obj = "text_completion"
        return web.json_response(
            {"id": cid, "object": obj, "model": model, "choices": [choice], "usage": usage}
        )

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        behaviour: Behaviour,
        k: int,
        entry: dict[str, Any],
    ) -> web.StreamResponse:
        chat = request.path.endswith("/chat/completions")
        texts = self._texts(body, self._n_tokens(body, behaviour))
        n_tokens = len(texts)
        prompt_tokens = entry["prompt_tokens"] = self._prompt_tokens(body)
        usage_wanted = self.script.usage == "always" or (
            self.script.usage == "requested"
            and bool((body.get("stream_options") or {}).get("include_usage"))
        )
        model = body.get("model", self.script.model)
        cid = f"fake-{entry['arrival_index']}"

        def chunk(text: str | None, finish: str | None = None, usage: Any = None) -> bytes:
            if chat:
                delta: dict[str, Any] = {} if text is None else {"content": text}
                if text == "" and self.script.role_chunk:
                    delta = {"role": "assistant", "content": ""}
                choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
                obj = "chat.completion.chunk"
            else:
                choices = [{"index": 0, "text": text or "", "finish_reason": finish}]
                obj = "text_completion"
            event: dict[str, Any] = {"id": cid, "object": obj, "model": model, "choices": choices}
            if usage is not None:
                event = {"id": cid, "object": obj, "model": model, "choices": [], "usage": usage}
            return b"data: " + json.dumps(event).encode() + b"\n\n"

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        times: list[float] = entry["chunk_times"]
        outcome = "completed"
        self.in_flight += 1
        try:
            await resp.prepare(request)
            if chat and self.script.role_chunk:
                await resp.write(chunk(""))
            for i in range(n_tokens):
                if behaviour.close_after_tokens is not None and i >= behaviour.close_after_tokens:
                    outcome = "closed"
                    break
                delay = (
                    _cycled(behaviour.ttft_ms, k) if i == 0 else _cycled(behaviour.itl_ms, i - 1)
                )
                delay += behaviour.ms_per_concurrent * (self.in_flight - 1)
                if delay > 0:
                    await asyncio.sleep(delay / 1000)
                if behaviour.malformed_after_tokens == i:
                    await resp.write(b'data: {"choices": [{"delta": {"content": "tok\n\n')
                if behaviour.wrong_shape_after_tokens == i:
                    await resp.write(b'data: {"choices": [{"delta": "tok"}]}\n\n')
                if behaviour.stall_after_tokens == i:
                    outcome = await self._stall(request, resp, behaviour)
                    break
                data = chunk(texts[i])
                # Stamp before the write: the send() inside it may wake the client, which can
                # then run before this process reads the clock again.
                times.append(time.monotonic())
                await resp.write(data)
            if outcome == "closed":
                assert request.transport is not None
                request.transport.abort()
            elif outcome == "stalled":
                pass
            else:
                await resp.write(chunk(None, finish="length" if n_tokens else "stop"))
                if usage_wanted:
                    usage = {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": n_tokens,
                        "total_tokens": prompt_tokens + n_tokens,
                    }
                    await resp.write(chunk(None, usage=usage))
                if self.script.done_marker:
                    await resp.write(b"data: [DONE]\n\n")
                await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            outcome = "client_gone"
        finally:
            self.in_flight -= 1
        entry.update(outcome=outcome, status=200, tokens=len(times), end=time.monotonic())
        self._write_log(entry)
        return resp


def read_log(path: Path) -> list[dict[str, Any]]:
    """The server's truth log: one entry per request, in the order requests ended."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


async def _serve(script: Script, host: str, port: int, log_path: Path | None) -> None:
    log = log_path.open("w", encoding="utf-8") if log_path else None
    server = MockServer(script, log)
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    site = web.SockSite(runner, sock, backlog=1024)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(server.watch_loop_lag())
    print(f"listening on http://{host}:{sock.getsockname()[1]}", flush=True)
    await stop.wait()
    watcher.cancel()
    await runner.cleanup()
    if log is not None:
        log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quantbench mock-server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", type=Path, help="JSON script (default: one instant behaviour)")
    parser.add_argument("--log", type=Path, help="truth log to write (JSONL)")
    args = parser.parse_args(argv)
    script = (
        Script.model_validate_json(args.script.read_text(encoding="utf-8"))
        if args.script
        else Script()
    )
    asyncio.run(_serve(script, args.host, args.port, args.log))
    return 0


class MockServerProcess:
    """Runs the fake server in its own process group; stops it by that group's id."""

    def __init__(self, script: Script, workdir: Path, log: bool = True) -> None:
        self.script = script
        self.workdir = workdir
        self.log_path: Path | None = workdir / "fake_server_log.jsonl" if log else None
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, timeout_s: float = 20.0) -> MockServerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        script_path = self.workdir / "fake_server_script.json"
        script_path.write_text(self.script.model_dump_json(), encoding="utf-8")
        args = ["--script", str(script_path)]
        if self.log_path is not None:
            args += ["--log", str(self.log_path)]
        self.proc = spawn_module("quantbench.mock_server", args, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        deadline = time.time() + timeout_s
        line = ""
        while time.time() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline()
            if line.startswith("listening on "):
                self.url = line.split()[-1]
                return self
        self.stop()
        raise RuntimeError(f"fake server did not start (last output: {line!r})")

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_group(self.proc)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def truth(self) -> list[dict[str, Any]]:
        if self.log_path is None:
            raise ValueError("this server was started without a log")
        return read_log(self.log_path)

    def __enter__(self) -> MockServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
