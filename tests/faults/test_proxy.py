"""The fault proxy breaks every answer it is told to (faults.proxy), on a scripted upstream."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from aiohttp import ClientSession, web
from faults.proxy import Proxy, ends_stream, main
from tests.engines.stranger import serve as serve_stranger

from quantbench.ports import free_port

# What llama-server streamed for a forced-length answer of 8 tokens in CI (2026-11-25): the
# tokens past EOS carry no text, so two content chunks, then the finish reason and [DONE]
FEW_TEXTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]},
    {"choices": [{"index": 0, "delta": {"content": " Paris"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "."}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
]


def test_the_end_of_an_answer_is_its_finish_reason_or_done() -> None:
    assert ends_stream(b'data:{"choices":[{"delta":{},"finish_reason":"length"}]}\n')
    assert ends_stream(b"data:[DONE]\n")
    assert not ends_stream(b'data:{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}\n')


async def _through_proxy(fault: str, requests: int = 1) -> list[str]:
    async def upstream_chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in FEW_TEXTS:
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    upstream = web.Application()
    upstream.router.add_post("/v1/chat/completions", upstream_chat)
    up_port, proxy_port = free_port(), free_port()
    runners = []
    for app, port in (
        (upstream, up_port),
        (Proxy(f"http://127.0.0.1:{up_port}", fault, after_requests=0, after_chunks=2).app(),
         proxy_port),
    ):  # fmt: skip
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
    try:
        bodies = []
        async with ClientSession() as client:
            url = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
            for _ in range(requests):
                async with client.post(url, json={"stream": True}) as resp:
                    bodies.append((await resp.read()).decode())
        return bodies
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


def test_an_answer_with_fewer_texts_than_the_cut_is_cut_at_its_end() -> None:
    """CI's real-cut scenario saw one of four answers pass whole: its 8 tokens streamed 2 texts,
    never more than the 2 the cut waits for. It is cut at its end instead."""
    [body] = asyncio.run(_through_proxy("cut"))
    assert '" Paris"' in body  # what came before the end is relayed
    assert 'finish_reason": "length' not in body and "[DONE]" not in body


def test_an_answer_with_fewer_texts_gets_its_wrong_shape_before_its_end() -> None:
    [body] = asyncio.run(_through_proxy("wrong-shape"))
    assert '"delta": "not an object"' in body
    assert body.index("not an object") < body.index("[DONE]")


def test_faults_named_together_take_turns_one_request_each() -> None:
    """One server start for two faults (the vLLM rows: a start is a minute on 2 cores)."""
    bodies = asyncio.run(_through_proxy("cut,no-tokens", requests=3))
    cut = [b for b in bodies if '" Paris"' in b and "[DONE]" not in b]
    empty = [b for b in bodies if "[DONE]" in b and "Paris" not in b]
    assert (cut, empty) == ([bodies[0], bodies[2]], [bodies[1]])


def test_an_unknown_fault_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SystemExit):
        main(["--port", "1", "--upstream-port", "2", "--fault", "cut,hang", "--", "true"])


# --- the proxy forwards only to the engine it started ---------------------------------------------

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "engines" / "fake_engine.py"


def _proxy(upstream: int, *engine: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    argv = [sys.executable, "-m", "faults.proxy", "--port", str(port)]
    argv += ["--upstream-port", str(upstream), "--", *engine]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "src")])}
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    return proc, port


def _get(port: int, path: str = "/health", wait_s: float = 20) -> tuple[int, str]:
    """The proxy's answer, once it listens (a 503 while the engine loads is waited out)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or time.monotonic() > deadline:
                return exc.code, exc.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def _ended(proc: subprocess.Popen[str], timeout: float = 20) -> tuple[int, str]:
    try:
        code = proc.wait(timeout=timeout)
    finally:
        proc.kill()
    return code, proc.stderr.read() if proc.stderr else ""


def test_the_proxy_forwards_to_its_own_engine() -> None:
    upstream = free_port()
    proc, port = _proxy(upstream, sys.executable, str(FAKE), str(upstream), "ok")
    try:
        assert _get(port) == (200, "ok")
    finally:
        proc.send_signal(signal.SIGTERM)
        code, _ = _ended(proc)
    assert code == 0  # stopped from outside, with its engine: nothing failed


def test_the_proxy_stops_with_its_engine_and_its_code() -> None:
    """A bind that failed behind the proxy once left it answering for a stranger: now the proxy
    ends when its engine does, with the engine's code, and the lifecycle sees a dead server."""
    died = "print('OSError: [Errno 98] Address already in use', flush=True); raise SystemExit(1)"
    proc, _ = _proxy(free_port(), sys.executable, "-c", died)
    code, err = _ended(proc)
    assert code == 1
    assert re.search(r"the engine \(PID \d+\) exited with code 1; the proxy stops", err)


def test_the_proxy_refuses_a_stranger_on_its_upstream_port() -> None:
    """A stranger took the upstream port before the engine bound it: its answers are not the
    engine's. The proxy answers 502 saying who holds the port, and stops, with its engine."""
    stranger = serve_stranger()
    engine = [sys.executable, "-c", "import time; time.sleep(60)"]
    proc, port = _proxy(stranger.server_address[1], *engine)
    try:
        status, text = _get(port)
        code, err = _ended(proc)
    finally:
        stranger.shutdown()
        stranger.server_close()
    assert status == 502
    held = f"upstream port {stranger.server_address[1]} is held by process {os.getpid()}"
    assert held in text and held in err and "address already in use" in text
    assert code == 1
