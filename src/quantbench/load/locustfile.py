"""The Locust user that streams chat/completions requests, and the dispatcher that feeds it.

Each Locust user is one stream slot: it takes the next ticket from this process's
:class:`Dispatcher`, sends it, reads the server-sent events and records every chunk's arrival
time. A closed loop hands tickets out as fast as users ask; an open loop releases them at their
arrival times, so the number of users only caps the requests in flight.

Locust times a streamed request until its headers only, and its statistics are bucketed; the
numbers that count come from the :class:`RequestRecord` of each request, and Locust's request event
is fired with the end-to-end time just so its own console and web UI show something sensible.

This module imports no torch and no transformers (see :mod:`quantbench.load`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent.event import Event
from gevent.queue import Queue
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError
from locust import User, constant, task
from locust.exception import StopUser

from quantbench.load.plan import LoadPlan, Ticket
from quantbench.load.records import RequestRecord
from quantbench.load.streaming import StreamError, StreamParser

# A keep-alive connection idle this long may have been closed by the server (uvicorn closes
# after 5 s); a POST on it would fail without being retried, so such a user reconnects first.
IDLE_RECONNECT_S = 2.0


class RunStopped(BaseException):
    """Thrown into a request still streaming when the run's time is up.

    A BaseException, so that no ``except Exception`` on the way (ours or a library's) can
    mistake the end of the run for a network error.
    """


class Dispatcher:
    """Hands out one process's tickets, tracks requests in flight, and knows when it is done."""

    def __init__(
        self, plan: LoadPlan, sink: Callable[[RequestRecord], None], worker: int = 0
    ) -> None:
        self.plan = plan
        self.sink = sink
        self.worker = worker
        self.t0 = 0.0
        self.started = Event()
        self.finished = Event()
        self.stopped = False
        self.expected = plan.share_size()
        self.in_flight: dict[Any, RequestRecord] = {}
        self._idle = Event()
        self._idle.set()
        self._tickets = plan.tickets()
        self._queue: Queue[Ticket | None] | None = Queue() if plan.mode == "open" else None
        self._bodies = [json.dumps(r.body).encode() for r in plan.requests]
        self.recorded = self.sent = self.completed = self.failed = self.incomplete = 0
        self.output_chunks = 0

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, t0: float) -> None:
        """Begin at wall-clock time ``t0`` (users wait until then)."""
        self.t0 = t0
        self.started.set()
        if self._queue is not None:
            gevent.spawn(self._release_arrivals)
        if self.plan.stop_after_s is not None:
            gevent.spawn(self._stop_at, t0 + self.plan.stop_after_s)
        if self.expected == 0:
            self.finished.set()

    def _release_arrivals(self) -> None:
        assert self._queue is not None
        for ticket in self._tickets:
            assert ticket.at is not None
            delay = self.t0 + ticket.at - time.time()
            if delay > 0:
                gevent.sleep(delay)
            if self.stopped:
                return
            self._queue.put(ticket)
        self._queue.put(None)

    def _stop_at(self, deadline: float) -> None:
        gevent.sleep(max(0.0, deadline - time.time()))
        if self.finished.is_set():
            return
        self.stopped = True
        now = time.time()
        if self._queue is not None:
            # Arrivals still waiting for a free slot did arrive: they count, as incomplete.
            while not self._queue.empty():
                ticket = self._queue.get()
                if ticket is not None:
                    self._record_unsent(ticket, now)
            self._queue.put(None)
        hub = gevent.get_hub()
        for glet, rec in list(self.in_flight.items()):
            hub.loop.run_callback(self._interrupt, glet, rec)
        self._idle.wait(timeout=30)
        self.finished.set()

    def _interrupt(self, glet: Any, rec: RequestRecord) -> None:
        # Runs in the hub; the greenlet may have finished this request in the meantime.
        if self.in_flight.get(glet) is rec:
            glet.throw(RunStopped())

    # -- tickets -----------------------------------------------------------------------------
    def next_ticket(self) -> Ticket | None:
        """The next request for a user, or None when there is nothing more to send."""
        self.started.wait()
        wait = self.t0 - time.time()
        if wait > 0:
            gevent.sleep(wait)
        if self.stopped:
            return None
        if self._queue is None:
            return next(self._tickets, None)
        ticket = self._queue.get()
        if ticket is None:
            self._queue.put(None)  # let the other waiting users see the end too
        return ticket if not self.stopped else None

    def run_ticket(self, client: HTTPClient, ticket: Ticket) -> RequestRecord:
        plan = self.plan
        rec = RequestRecord(
            request_id=f"{plan.id_prefix}{ticket.index}",
            index=ticket.index,
            point=plan.point,
            scenario=ticket.request.scenario,
            prompt_id=ticket.request.prompt_id,
            warmup=ticket.warmup,
            worker=self.worker,
            send_time=time.time(),
            scheduled_time=None if ticket.at is None else self.t0 + ticket.at,
        )
        glet = gevent.getcurrent()
        self.in_flight[glet] = rec
        self._idle.clear()
        self.sent += 1
        try:
            stream_request(client, plan, self._bodies[ticket.index % len(self._bodies)], rec)
        except RunStopped:
            rec.status = "incomplete"
            rec.error = "in flight when the run ended"
            rec.end_time = time.time()
        finally:
            del self.in_flight[glet]
            self._record(rec)
            if not self.in_flight:
                self._idle.set()
        return rec

    def _record_unsent(self, ticket: Ticket, now: float) -> None:
        assert ticket.at is not None
        due = self.t0 + ticket.at
        self._record(
            RequestRecord(
                request_id=f"{self.plan.id_prefix}{ticket.index}",
                index=ticket.index,
                point=self.plan.point,
                scenario=ticket.request.scenario,
                prompt_id=ticket.request.prompt_id,
                warmup=ticket.warmup,
                worker=self.worker,
                send_time=due,
                scheduled_time=due,
                end_time=now,
                status="incomplete",
                error="waited for a free slot until the run ended (never sent)",
            )
        )

    def _record(self, rec: RequestRecord) -> None:
        if self.plan.warmup_s and rec.send_time < self.t0 + self.plan.warmup_s:
            rec.warmup = True
        self.recorded += 1
        if rec.status == "completed":
            self.completed += 1
        elif rec.status == "failed":
            self.failed += 1
        else:
            self.incomplete += 1
        self.output_chunks += len(rec.chunk_times)
        self.sink(rec)
        if self.expected is not None and self.recorded >= self.expected:
            self.finished.set()


def stream_request(client: HTTPClient, plan: LoadPlan, body: bytes, rec: RequestRecord) -> None:
    """Send one streaming request and fill ``rec``; never raises except :class:`RunStopped`."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "X-Request-Id": rec.request_id,
    }
    rec.send_time = time.time()
    try:
        try:
            resp = client.request("POST", plan.path, body=body, headers=headers)
        except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError):
            # A kept-alive connection the server closed just before we wrote on it (llama-server
            # did this to ~1 request in 8): the request never reached it, so send it once more on
            # a fresh connection, timed from the new send. A second failure is recorded.
            rec.send_time = time.time()
            resp = client.request("POST", plan.path, body=body, headers=headers)
    except TimeoutError:
        _fail(rec, f"timeout: no response within {plan.timeout_s:g} s")
        return
    except (OSError, HTTPConnectionClosed, HTTPParseError) as e:
        _fail(rec, f"connection error: {type(e).__name__}: {e}")
        return
    rec.http_status = resp.status_code
    try:
        if resp.status_code != 200:
            text = resp.read().decode("utf-8", "replace").strip()
            _fail(rec, f"HTTP {resp.status_code}: {text[:300]}")
            return
        parser = StreamParser(rec, plan.api)
        while True:
            line = resp.readline(b"\n")
            t = time.time()
            if not line:
                break
            parser.feed_line(line, t)
            if parser.done:
                break
        parser.finish()
        rec.end_time = time.time()
        rec.status = "completed"
        if parser.done:
            _drain(resp)
    except StreamError as e:
        _fail(rec, str(e))
    except TimeoutError:
        _fail(rec, f"timeout: no data for {plan.timeout_s:g} s after {len(rec.chunk_times)} chunks")
    except (OSError, HTTPConnectionClosed, HTTPParseError) as e:
        _fail(
            rec,
            f"stream broken after {len(rec.chunk_times)} chunks: {type(e).__name__}: {e}",
        )
    finally:
        resp.release()  # closes the connection unless the body was read to its end


def _drain(resp: Any) -> None:
    # After [DONE] only the end of the chunked body should follow; reading it keeps the
    # connection reusable. Whatever happens here does not change the request's outcome.
    try:
        while resp.readline(b"\n"):
            pass
    except (OSError, HTTPConnectionClosed, HTTPParseError):
        pass


def _fail(rec: RequestRecord, error: str) -> None:
    rec.status = "failed"
    rec.error = error
    rec.end_time = time.time()


# -- the one dispatcher of this process --------------------------------------------------------
_dispatcher: Dispatcher | None = None
_dispatcher_ready = Event()


def set_dispatcher(dispatcher: Dispatcher) -> None:
    global _dispatcher
    _dispatcher = dispatcher
    _dispatcher_ready.set()


def current_dispatcher() -> Dispatcher:
    _dispatcher_ready.wait()
    assert _dispatcher is not None
    return _dispatcher


class StreamingUser(User):
    """One stream slot. Takes tickets from this process's dispatcher until none are left."""

    wait_time = constant(0)

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self._client: HTTPClient | None = None
        self._last_used = 0.0

    def _http(self, plan: LoadPlan) -> HTTPClient:
        now = time.time()
        if self._client is not None and now - self._last_used > IDLE_RECONNECT_S:
            self._client.close()
            self._client = None
        if self._client is None:
            self._client = HTTPClient.from_url(
                plan.url,
                concurrency=1,
                connection_timeout=plan.timeout_s,
                network_timeout=plan.timeout_s,
                headers=plan.headers,
                insecure=True,
            )
        return self._client

    @task
    def send_next(self) -> None:
        dispatcher = current_dispatcher()
        ticket = dispatcher.next_ticket()
        if ticket is None:
            raise StopUser()
        rec = dispatcher.run_ticket(self._http(dispatcher.plan), ticket)
        self._last_used = time.time()
        e2e = rec.e2e
        self.environment.events.request.fire(
            request_type="POST",
            name=dispatcher.plan.point,
            response_time=0.0 if e2e is None else e2e * 1000,
            response_length=len(rec.output_text or ""),
            exception=None if rec.status == "completed" else Exception(rec.error),
            context={},
        )

    def on_stop(self) -> None:
        if self._client is not None:
            self._client.close()
