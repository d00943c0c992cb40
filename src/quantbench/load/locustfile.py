"""The Locust user that runs conversations of streaming requests from this process's dispatcher.

Each Locust user is one stream slot: it takes the next conversation from the process's
:class:`~quantbench.load.dispatch.Dispatcher`, sends its turns one after the other (each after its
think time, with the history resent), reads the server-sent events and records every chunk's
arrival time. A closed loop hands conversations out as fast as users ask; an open loop releases
them at their arrival times, so the number of users only caps the conversations in progress.

Locust times a streamed request until its headers only, and its statistics are bucketed; the
numbers that count come from the :class:`RequestRecord` of each request. This module imports no
torch and no transformers.
"""

from __future__ import annotations

import time
from typing import Any

from gevent.event import Event
from geventhttpclient import HTTPClient
from locust import User, constant, task
from locust.exception import StopUser

from quantbench.load.dispatch import Dispatcher
from quantbench.workloads.plan import LoadPlan

# A keep-alive connection idle this long may have been closed by the server (uvicorn closes
# after 5 s); a POST on it would fail without being retried, so such a user reconnects first.
IDLE_RECONNECT_S = 2.0


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
    """One stream slot. Takes conversations from this process's dispatcher until none are left."""

    wait_time = constant(0)

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self._client: HTTPClient | None = None
        self._last_used = 0.0

    def _http(self, plan: LoadPlan) -> HTTPClient:
        now = time.monotonic()
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
        self._last_used = now
        return self._client

    @task
    def send_next(self) -> None:
        dispatcher = current_dispatcher()
        ticket = dispatcher.next_ticket()
        if ticket is None:
            raise StopUser()
        dispatcher.run_conversation(lambda: self._http(dispatcher.plan), ticket)
        self._last_used = time.monotonic()
        self.environment.events.request.fire(
            request_type="POST",
            name=dispatcher.plan.point,
            response_time=0.0,
            response_length=0,
            exception=None,
            context={},
        )

    def on_stop(self) -> None:
        if self._client is not None:
            self._client.close()
