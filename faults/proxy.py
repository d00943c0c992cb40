"""A scriptable proxy in front of a real engine: the streams a real server never sends on cue.

    python -m faults.proxy --port P --upstream-port U --fault wrong-shape -- llama-server ... --port U

It starts the engine's own command line as its child (in its process group, so the server
lifecycle that stops the proxy stops the engine too), forwards every request to it, and from the
request after ``--after-requests`` on (the warm-up passes untouched) breaks the answer stream of
chat completions in one way (after ``--after-chunks`` content chunks, or at the answer's end if
it streams fewer):

* ``wrong-shape``: after ``--after-chunks`` content chunks, an event of valid JSON and the wrong
  shape (a string ``delta``), then the rest of the real stream;
* ``keepalive``: after those chunks, only SSE comments, every 50 ms, until the client gives up;
* ``no-tokens``: HTTP 200 with a role chunk, a finish reason and ``[DONE]``: no token at all;
* ``cut``: after those chunks, the body ends cleanly, without a finish reason or ``[DONE]``;
* ``hang-after-headers``: HTTP 200 headers, then nothing until the client gives up;
* ``none``: a faithful proxy.

Several faults separated by commas take turns, one request each (``cut,hang-after-headers``: the
first faulty request is cut, the second hangs, the third is cut...): one server start for two
faults, where a start costs a minute (vLLM on 2 cores).

Test infrastructure for ``make faults``; it binds only where it is told (loopback in every
scenario) and forwards only to the engine it started: the process listening on the upstream port
must be the engine or one of its processes (a port chosen free can be taken by another process
before the engine binds it), and the proxy exits when the engine does, with the engine's code, so
the server lifecycle in front sees a dead engine as a dead server (and a lost port as one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

FAULTS = ("none", "wrong-shape", "keepalive", "no-tokens", "cut", "hang-after-headers")
WRONG_SHAPE = b'data: {"choices": [{"index": 0, "delta": "not an object"}]}\n\n'
KEEPALIVE_S = 0.05
WATCH_S = 0.2  # how often the proxy looks whether its engine still runs


def ends_stream(compact: bytes) -> bool:
    """The SSE line (spaces removed) that ends an answer: a finish reason, or ``[DONE]``."""
    if compact.startswith(b"data:[DONE]"):
        return True
    return b'"finish_reason":"' in compact


class Proxy:
    def __init__(
        self,
        upstream: str,
        fault: str,
        after_requests: int,
        after_chunks: int,
        requests_log: Path | None = None,
        child: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.requests_log = requests_log
        self.child = child  # the engine: watched, and the only process allowed upstream
        self.upstream_ours = child is None
        self.stranger = False  # a stranger held the upstream port: the proxy refused it
        self.closing = False  # stopping from outside: the engine's exit is expected then
        self.upstream = upstream
        self.fault = fault
        self.after_requests = after_requests
        self.after_chunks = after_chunks
        self.chats = 0
        self.session: ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_route("*", "/{tail:.*}", self.forward)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        if self.child is not None:
            app.on_startup.append(self._start_watch)
        app.on_shutdown.append(self._closing)
        return app

    async def _closing(self, _app: web.Application) -> None:
        self.closing = True

    async def _start_watch(self, app: web.Application) -> None:
        app["watch"] = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        """Stop the proxy once its engine has exited: what answers then is a dead server."""
        assert self.child is not None
        while self.child.poll() is None:
            await asyncio.sleep(WATCH_S)
        if self.closing:  # the same signal stopped both
            return
        self._stop(f"the engine (PID {self.child.pid}) exited with code {self.child.returncode}")

    def _stop(self, why: str) -> None:
        print(f"faults.proxy: {why}; the proxy stops", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # run_app's own graceful exit

    def _check_upstream(self) -> str | None:
        """Why the upstream may not be used, or None: a listener there that is not our engine
        (or one of its processes) is a stranger that took the port first."""
        if self.upstream_ours:
            return None
        from urllib.parse import urlsplit

        import psutil

        from quantbench.engines.server import listening_pids, process_summary

        assert self.child is not None
        port = urlsplit(self.upstream).port or 80
        owners = listening_pids("127.0.0.1", port)
        if not owners:
            return None  # nothing listening yet (the engine is loading): a 503 says so
        try:
            tree = {self.child.pid, *(p.pid for p in psutil.Process(self.child.pid).children(True))}
        except psutil.Error:
            tree = set()
        if owners & tree:
            self.upstream_ours = True
            return None
        owner = min(owners)
        return (f"upstream port {port} is held by process {owner} ({process_summary(owner)}), "
                "not the engine this proxy started: address already in use")  # fmt: skip

    def _refuse_stranger(self) -> web.Response | None:
        why = self._check_upstream()
        if why is None:
            return None
        self.stranger = True
        self._stop(why)
        return web.Response(status=502, text=why)

    async def _open(self, _app: web.Application) -> None:
        # A fresh connection per request: llama-server closes kept-alive connections now and
        # then, which a pooled connection turns into a 500 of the proxy's own.
        self.session = ClientSession(
            timeout=ClientTimeout(total=None, sock_connect=5),
            connector=TCPConnector(force_close=True),
        )

    async def _close(self, _app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    async def forward(self, request: web.Request) -> web.Response:
        """Anything but a chat completion, passed through as it is (health, models, slots)."""
        assert self.session is not None
        refused = self._refuse_stranger()
        if refused is not None:
            return refused
        try:
            async with self.session.request(
                request.method,
                self.upstream + request.path_qs,
                data=await request.read(),
                headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
            ) as up:
                body = await up.read()
                return web.Response(
                    status=up.status, body=body, content_type=up.content_type or None
                )
        except (OSError, ClientError):  # the engine is loading or gone: what a dead port says
            return web.Response(status=503, text="upstream not answering")

    async def _until_gone(self, request: web.Request, resp: web.StreamResponse | None) -> None:
        transport = request.transport
        while transport is not None and not transport.is_closing():
            await asyncio.sleep(KEEPALIVE_S)
            if resp is not None:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await resp.write(b": keep-alive\n\n")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        refused = self._refuse_stranger()
        if refused is not None:
            return refused
        body = await request.read()
        self.chats += 1
        if self.requests_log is not None:  # so a scenario can strike while requests stream
            with self.requests_log.open("a", encoding="utf-8") as log:
                log.write(f"{self.chats}\n")
        faults = self.fault.split(",")
        struck = self.chats - self.after_requests - 1  # requests the fault struck before this
        fault = faults[struck % len(faults)] if struck >= 0 else "none"
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        if fault == "hang-after-headers":
            await resp.prepare(request)
            await self._until_gone(request, None)
            return resp
        if fault == "no-tokens":
            await resp.prepare(request)
            for event in (
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ):
                await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        try:
            return await self._relay(request, body, fault, resp)
        except ClientError as exc:  # the engine went away: say so, as a dead server would
            if not resp.prepared:
                return web.Response(status=502, text=f"upstream failed: {exc}")
            return resp

    async def _relay(
        self, request: web.Request, body: bytes, fault: str, resp: web.StreamResponse
    ) -> web.StreamResponse:
        assert self.session is not None
        headers = {"Content-Type": "application/json"}
        async with self.session.post(
            self.upstream + request.path_qs, data=body, headers=headers
        ) as up:
            if up.status != 200:
                return web.Response(status=up.status, body=await up.read())
            await resp.prepare(request)
            chunks = 0
            try:
                async for line in up.content:
                    compact = line.replace(b" ", b"")
                    if line.startswith(b"data:") and b'"content":"' in compact:
                        chunks += 1
                    # an answer whose tokens stream few texts (tokens past EOS under a forced
                    # length stream none) can end before `after_chunks` content chunks: the
                    # fault strikes at its end then, so no answer passes whole
                    if fault != "none" and (chunks > self.after_chunks or ends_stream(compact)):
                        if fault == "wrong-shape":
                            await resp.write(WRONG_SHAPE)
                            fault = "none"  # then the rest of the real stream
                        elif fault == "keepalive":
                            await self._until_gone(request, resp)
                            return resp
                        elif fault == "cut":
                            await resp.write_eof()
                            return resp
                    await resp.write(line)
                await resp.write_eof()
            except (ConnectionError, RuntimeError):
                pass  # the client gave up (as it should on a broken stream)
        return resp


def _faults(text: str) -> str:
    unknown = [f for f in text.split(",") if f not in FAULTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fault(s) {unknown}: choose from {FAULTS}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.proxy", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument(
        "--fault",
        type=_faults,
        default="none",
        help=f"one of {', '.join(FAULTS)}, or several separated by commas, taking turns",
    )
    parser.add_argument("--after-requests", type=int, default=1)
    parser.add_argument("--after-chunks", type=int, default=2)
    parser.add_argument("--pidfile", type=Path, help="write the engine's PID here")
    parser.add_argument(
        "--requests-log", type=Path, help="append a line here as each chat request arrives"
    )
    parser.add_argument("engine", nargs=argparse.REMAINDER, help="-- the engine's command line")
    args = parser.parse_args(argv)
    engine = args.engine[1:] if args.engine[:1] == ["--"] else args.engine
    if not engine:
        parser.error("give the engine's command line after --")
    child = subprocess.Popen(engine)  # an argv list, never a shell
    if args.pidfile is not None:
        args.pidfile.write_text(str(child.pid), encoding="utf-8")
    proxy = Proxy(
        f"http://127.0.0.1:{args.upstream_port}",
        args.fault,
        args.after_requests,
        args.after_chunks,
        args.requests_log,
        child,
    )
    exited = None
    try:
        web.run_app(proxy.app(), host=args.host, port=args.port, print=None)
    finally:
        exited = child.poll()  # the engine's own exit, before we stop it
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
    # the engine's code where it failed on its own (a bind that failed: the server's failure)
    if exited is not None and exited > 0:
        return exited
    return 1 if proxy.stranger else 0


if __name__ == "__main__":
    sys.exit(main())
