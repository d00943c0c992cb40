"""The dispatcher that hands a load process its conversations, and the request that streams one.

What the dispatcher guarantees, so a point measures the load it claims:

* **steady load**: warm-up conversations go first; then measured ones until the plan has measured
  enough (a count, a duration, or a precision target met); then cool-down conversations keep every
  stream busy (closed loop) or keep arriving (open loop) until each measured request has ended.
  The cool-down ones are stopped then; their tokens inside the window still count.
* **nothing vanishes**: every request has a record with a status; an open-loop arrival that never
  got a slot is recorded ``unsent``; the turns a measured conversation could not send when the
  point stopped are recorded ``unsent`` too.
* **deadlines**: a request that receives nothing for ``timeout_s`` fails, one still streaming
  ``request_timeout_s`` after its send fails (a stream kept alive by comments forever), and the
  whole point stops ``point_timeout_s`` after its start.

Times are ``time.monotonic()`` (see :mod:`quantbench.load.records`). This module uses gevent but
not Locust (which monkey-patches the process on import), so tests can drive a dispatcher directly.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import gevent
from gevent.event import Event
from gevent.queue import Queue
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

from quantbench.load.race import cannot_reach
from quantbench.load.records import RequestRecord, Tally
from quantbench.load.requests import turn_body
from quantbench.load.streaming import StreamError, StreamParser
from quantbench.precision import proportion_bounds, quantile_bounds, quantile_interval
from quantbench.workloads.marker import marker_digits, stamp
from quantbench.workloads.plan import Conversation, LoadPlan, Precision, Ticket

# After the stop, in-flight requests get this long to notice the interruption and be recorded.
STOP_GRACE_S = 30.0


class RunStopped(BaseException):
    """Thrown into a request still streaming when the point stops.

    A BaseException, so that no ``except Exception`` on the way (ours or a library's) can
    mistake the end of the point for a network error.
    """


class RequestDeadline(BaseException):
    """Thrown into a request still streaming ``request_timeout_s`` after it was sent."""


class Dispatcher:
    """Hands out one process's conversations, tracks them, and knows when the point is done."""

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
        self.stop_reason = ""
        self.in_flight: dict[Any, RequestRecord] = {}
        self._idle = Event()
        self._idle.set()
        self._next = plan.share_index  # global conversation index of this share's next one
        self._queue: Queue[Ticket | None] | None = Queue() if plan.mode == "open" else None
        self.measuring = True
        self.measured_started = 0
        self.measured_open: set[int] = set()
        self.measure_open_time: float | None = None
        self.values: dict[str, list[float]] = {"ttft": [], "tpot": [], "itl": [], "e2e": []}
        self._completed_measured = 0
        self._unanswered_measured = 0  # measured requests that failed, were cut or never sent
        self.tally = Tally()  # every record so far, by status
        # every record, kept only where the point races the pair's leader (its looks summarize)
        racing = plan.precision is not None and plan.precision.race is not None
        self._race_records: list[RequestRecord] | None = [] if racing else None
        if plan.precision is not None:
            # What the looks compute with, imported before the point's clock starts: imported at
            # its first look (the fourth measured request), scipy.stats blocked the event loop
            # for 0.6-0.9 s, and every request in flight stalled with it (a TTFT or a gap that
            # much late, a stream idle in the measured window). Here, not in the template every
            # load process is forked from: an open loop's first arrivals left up to 44 ms late
            # from a template holding it (20 ms allowed, tests/load/test_runs.py).
            import scipy.stats  # noqa: F401

    # -- phases ------------------------------------------------------------------------------
    def _phase(self, index: int, at: float | None) -> str | None:
        """The phase of conversation ``index`` (arriving at offset ``at``), or None for none."""
        plan = self.plan
        warm = index < plan.warmup_conversations or (
            plan.warmup_s > 0 and (time.monotonic() - self.t0 if at is None else at) < plan.warmup_s
        )
        if warm:
            return "warmup"
        if (
            self.measuring
            and plan.adaptive
            and plan.measured_conversations is not None
            and self.measured_started >= plan.measured_conversations
        ):
            self._stop_measuring(f"measured the most allowed ({plan.measured_conversations})")
        if self.measuring and not plan.adaptive and plan.measured_conversations is not None:
            # fixed counts (also in distributed shares): by global index
            last = plan.warmup_conversations + plan.measured_conversations
            if index < last:
                return "measured"
            self._stop_measuring("measured all planned conversations")
        if self.measuring:
            return "measured"
        return "cooldown" if self.measured_open else None

    def _stop_measuring(self, why: str) -> None:
        if self.measuring:
            self.measuring = False
            self.stop_reason = why
            self._maybe_finish()

    def _check_duration(self, now: float) -> None:
        d = self.plan.duration_s
        if (
            d is not None
            and self.measure_open_time is not None
            and now >= self.measure_open_time + d
        ):
            self._stop_measuring(f"measured for {d:g} s")

    def _maybe_finish(self) -> None:
        if not self.measuring and not self.measured_open and not self.stopped:
            gevent.spawn(self._stop, "every measured request has ended")

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, t0: float) -> None:
        """Begin at monotonic time ``t0`` (users wait until then)."""
        self.t0 = t0
        self.started.set()
        if self._queue is not None:
            gevent.spawn(self._release_arrivals)
        gevent.spawn(self._deadline, t0 + self.plan.point_timeout_s)
        if self.plan.duration_s is not None:
            gevent.spawn(self._duration_watch)

    def _duration_watch(self) -> None:
        while not self.finished.is_set() and self.measuring:
            self._check_duration(time.monotonic())
            gevent.sleep(0.05)

    def _deadline(self, deadline: float) -> None:
        gevent.sleep(max(0.0, deadline - time.monotonic()))
        if not self.finished.is_set():
            self._stop(f"the point's deadline ({self.plan.point_timeout_s:g} s) passed")

    def _stop(self, why: str) -> None:
        if self.stopped:
            return
        self.stopped = True
        if not self.stop_reason:
            self.stop_reason = why
        elif self.measured_open and why not in self.stop_reason:
            # measuring had ended, but measured requests were still open at this stop
            self.stop_reason = (
                f"{self.stop_reason}; then {why} with {len(self.measured_open)} measured "
                "conversations unfinished"
            )
        now = time.monotonic()
        if self._queue is not None:
            while not self._queue.empty():
                ticket = self._queue.get()
                if ticket is not None and ticket.phase == "measured":
                    self._record_unsent(
                        ticket, 0, now, "arrived but never got a slot before the stop"
                    )
            self._queue.put(None)
        hub = gevent.get_hub()
        for glet, rec in list(self.in_flight.items()):
            hub.loop.run_callback(self._interrupt, glet, rec, RunStopped)
        self._idle.wait(timeout=STOP_GRACE_S)
        self.finished.set()

    def _interrupt(self, glet: Any, rec: RequestRecord, exc: type[BaseException]) -> None:
        # Runs in the hub; the greenlet may have finished this request in the meantime.
        if self.in_flight.get(glet) is rec:
            glet.throw(exc())

    # -- open loop ---------------------------------------------------------------------------
    def _release_arrivals(self) -> None:
        assert self._queue is not None
        offsets: Iterator[float] = self.plan.arrival_offsets()
        for index, offset in enumerate(offsets):
            if self.stopped or self.finished.is_set():
                return
            if index % self.plan.share_count != self.plan.share_index:
                continue
            delay = self.t0 + offset - time.monotonic()
            if delay > 0:
                gevent.sleep(delay)
            if self.stopped:
                return
            phase = self._phase(index, offset)
            if phase is None:
                self._queue.put(None)
                return
            ticket = Ticket(index, self.plan.conversation(index), offset, phase)  # type: ignore[arg-type]
            self._begin(ticket)
            self._queue.put(ticket)

    # -- tickets -----------------------------------------------------------------------------
    def _begin(self, ticket: Ticket) -> None:
        if ticket.phase == "measured":
            self.measured_started += 1
            self.measured_open.add(ticket.index)
            if self.measure_open_time is None:
                at = self.t0 + ticket.at if ticket.at is not None else time.monotonic()
                self.measure_open_time = at

    def next_ticket(self) -> Ticket | None:
        """The next conversation for a user, or None when there is nothing more to send."""
        self.started.wait()
        wait = self.t0 - time.monotonic()
        if wait > 0:
            gevent.sleep(wait)
        if self.stopped:
            return None
        if self._queue is None:
            index = self._next
            phase = self._phase(index, None)
            if phase is None:
                return None
            self._next += self.plan.share_count
            ticket = Ticket(index, self.plan.conversation(index), None, phase)  # type: ignore[arg-type]
            self._begin(ticket)
            return ticket
        ticket = self._queue.get()
        if ticket is None:
            self._queue.put(None)  # let the other waiting users see the end too
        return ticket if not self.stopped else None

    def run_conversation(self, client_for: Callable[[], HTTPClient], ticket: Ticket) -> None:
        """Send the conversation's turns in order; record each; keep the history."""
        plan = self.plan
        conv: Conversation = ticket.conversation
        cid = f"{plan.id_prefix}{ticket.index}"
        # the conversation's own marker, written over the room the traffic made for it
        digits = marker_digits(plan.id_prefix, ticket.index)
        history: list[dict[str, Any]] = []
        if conv.system is not None:
            history.append({"role": "system", "content": conv.system})
        scheduled = None if ticket.at is None else self.t0 + ticket.at
        try:
            for k, turn in enumerate(conv.turns):
                if k > 0 and turn.think_s > 0 and not self.stopped:
                    gevent.sleep(turn.think_s)
                if self.stopped:
                    if ticket.phase == "measured":
                        for j in range(k, len(conv.turns)):
                            self._record_unsent(
                                ticket, j, time.monotonic(), "not sent: the point stopped"
                            )
                    return
                content = turn.content
                if k == 0 and plan.unique_prompts:
                    content = stamp(content, digits)
                user = {"role": "user", "content": content}
                if plan.api == "chat":
                    body = turn_body(
                        plan.rules, api="chat", max_tokens=turn.max_tokens,
                        messages=[*history, user],
                    )  # fmt: skip
                else:
                    prompt = conv.raw_prompt if conv.raw_prompt is not None else content
                    if plan.unique_prompts and k == 0 and conv.raw_prompt is not None:
                        prompt = stamp(prompt, digits)
                    body = turn_body(plan.rules, api="completions", max_tokens=turn.max_tokens,
                                     prompt=prompt)  # fmt: skip
                rec = RequestRecord(
                    request_id=f"{cid}.{k}" if len(conv.turns) > 1 else cid,
                    index=ticket.index,
                    point=plan.point,
                    scenario=conv.scenario,
                    prompt_id=conv.prompt_id,
                    phase=ticket.phase,
                    worker=self.worker,
                    send_time=time.monotonic(),
                    scheduled_time=scheduled if k == 0 else None,
                    requested_tokens=turn.max_tokens,
                    conversation=cid,
                    turn=k,
                )
                self._run_request(client_for(), json.dumps(body).encode(), rec)
                if rec.status != "completed":
                    if ticket.phase == "measured":
                        for j in range(k + 1, len(conv.turns)):
                            self._record_unsent(
                                ticket, j, time.monotonic(), f"not sent: turn {k} did not complete"
                            )
                    return
                history += [user, {"role": "assistant", "content": rec.output_text or ""}]
        finally:
            if ticket.phase == "measured":
                self.measured_open.discard(ticket.index)
                self._maybe_finish()

    def _run_request(self, client: HTTPClient, body: bytes, rec: RequestRecord) -> None:
        plan = self.plan
        glet = gevent.getcurrent()
        self.in_flight[glet] = rec
        self._idle.clear()
        deadline = gevent.spawn_later(plan.request_timeout_s, self._deadline_hit, glet, rec)
        try:
            stream_request(client, plan, body, rec)
        except RunStopped:
            rec.status = "incomplete"
            rec.error = "in flight when the point stopped"
            rec.end_time = time.monotonic()
        except RequestDeadline:
            rec.status = "failed"
            rec.error = (
                f"timeout: no complete answer within {plan.request_timeout_s:g} s "
                f"(request_timeout_s) after {len(rec.chunk_times)} chunks"
            )
            rec.end_time = time.monotonic()
        finally:
            deadline.kill()
            del self.in_flight[glet]
            self._record(rec)
            if not self.in_flight:
                self._idle.set()

    def _deadline_hit(self, glet: Any, rec: RequestRecord) -> None:
        self._interrupt(glet, rec, RequestDeadline)

    def _record_unsent(self, ticket: Ticket, turn: int, now: float, why: str) -> None:
        conv = ticket.conversation
        cid = f"{self.plan.id_prefix}{ticket.index}"
        due = self.t0 + ticket.at if ticket.at is not None and turn == 0 else now
        self._record(
            RequestRecord(
                request_id=f"{cid}.{turn}" if len(conv.turns) > 1 else cid,
                index=ticket.index,
                point=self.plan.point,
                scenario=conv.scenario,
                prompt_id=conv.prompt_id,
                phase=ticket.phase,
                worker=self.worker,
                send_time=due,
                scheduled_time=due if ticket.at is not None and turn == 0 else None,
                requested_tokens=conv.turns[turn].max_tokens,
                end_time=now,
                status="unsent",
                error=why,
                conversation=cid,
                turn=turn,
            )
        )

    def _record(self, rec: RequestRecord) -> None:
        if self._race_records is not None:
            self._race_records.append(rec)
        self.tally.add(rec)
        self.sink(rec)
        if rec.phase == "measured" and rec.status != "completed":
            self._unanswered_measured += 1
        if rec.phase == "measured" and rec.status == "completed":
            self._completed_measured += 1
            self._note(rec)
        self._check_duration(time.monotonic())

    def _note(self, rec: RequestRecord) -> None:
        """Keep a measured request's latencies; stop measuring once the precision is met."""
        if rec.ttft is not None:
            self.values["ttft"].append(rec.ttft)
        if rec.tpot is not None:
            self.values["tpot"].append(rec.tpot)
        if rec.e2e is not None:
            self.values["e2e"].append(rec.e2e)
        self.values["itl"].extend(rec.itls)
        p = self.plan.precision
        if p is None or not self.measuring:
            return
        if self.plan.measured_conversations is not None and (
            self.measured_started >= self.plan.measured_conversations
        ):
            self._stop_measuring(f"measured the most allowed ({self.plan.measured_conversations})")
            return
        if p.max_measured is not None and self._completed_measured >= p.max_measured:
            # multi-turn conversations: the cap is on requests, whatever their conversations
            self._stop_measuring(f"measured the most allowed ({p.max_measured} requests)")
            return
        if self._completed_measured % p.check_every:
            return
        # A fail is decided as the verdict decides it (a one-sided lower bound above the limit,
        # quantbench.slo), as soon as such a bound exists: a point sized for the power to PASS
        # (a p90: 61 requests) need not run that long to show it cannot. The point is looked at
        # every check_every requests, and repeated looks must not turn noise into a fail: each
        # is tested at the nominal level of a group-sequential boundary over the looks the cap
        # allows (quantbench.sequential), which all of them together cross at the error rate.
        look_confidence, looks = p.fail_look_level()
        for metric, pct, limit in p.fail_limits:
            # Only completed requests are here; the unanswered would count as infinitely late,
            # which can only raise the percentile: a fail decided on these is a fail.
            bounds = quantile_bounds(self.values[metric], pct, look_confidence)
            if bounds is not None and bounds.lower is not None and bounds.lower > limit:
                self._stop_measuring(
                    f"fails its SLO beyond noise: {metric} p{pct:g} at least "
                    f"{bounds.lower * 1e3:.0f} ms (one-sided {look_confidence:.2%} a look: "
                    f"{p.confidence:.0%} over {looks} looks, group-sequential), above "
                    f"{limit * 1e3:.0f} ms, after {self._completed_measured} measured requests"
                )
                return
        if p.first_look is not None and self._completed_measured == p.first_look:
            # the verdict is decided: the point stops whatever its precision targets say (its
            # figures keep their intervals; what the decision cannot separate, the decide stage
            # measures again). TPOT drifts on a CPU server: its p50 within ±5 % took 88 requests
            # or more at one stream, where 36 showed the pass.
            shown = self._pass_shown(p)
            if shown is not None:
                self._stop_measuring(shown)
                return
        if p.race is not None and self._race_records is not None:
            # a closed loop's streams bound it before min_requests (a point shared between load
            # processes is not precision-sized: this process's users are all its streams)
            streams = self.plan.users if self.plan.mode == "closed" else None
            lost = cannot_reach(
                p.race, self._completed_measured, self._race_records, self.in_flight.values(),
                streams,
            )  # fmt: skip
            if lost is not None:
                self._stop_measuring(lost)
                return
        if self._completed_measured < p.min_measured:
            return
        if self._targets_met(p):
            self._stop_measuring(
                "precision met: "
                + ", ".join(f"{m} p{q:g} within ±{w:.0%}" for m, q, w in p.targets)
                + f" after {self._completed_measured} measured requests"
            )

    def _targets_met(self, p: Precision) -> bool:
        for metric, pct, width in p.targets:
            interval = quantile_interval(self.values[metric], pct, p.confidence)
            if interval is None or interval.relative_half_width > width:
                return False
        return True

    def _pass_shown(self, p: Precision) -> str | None:
        """The first look of the early-pass design (quantbench.slo.EarlyPass): the reason to stop
        where every limit is shown met at the design's one-sided level, judged as the verdict
        judges it (an unanswered request infinitely late for TTFT and E2E, an error for the
        error rate); None where one is not."""
        level = p.verdict_confidence
        assert level is not None
        unanswered = self._unanswered_measured
        for metric, pct, limit in p.pass_limits:
            late = [math.inf] * unanswered if metric in ("ttft", "e2e") else []
            bounds = quantile_bounds([*self.values[metric], *late], pct, level)
            if bounds is None or bounds.upper is None or not bounds.upper <= limit:
                return None
        n = self._completed_measured + unanswered
        if p.error_limit is not None:
            bounds = proportion_bounds(unanswered, n, level)
            if bounds is None or bounds.upper is None or not bounds.upper <= p.error_limit:
                return None
        return (
            f"SLO shown met at the first look (one-sided {level:.1%} a look: "
            f"{1 - 2 * (1 - level):.0%} over 2 looks), after "
            f"{self._completed_measured} measured requests"
        )


def stream_request(client: HTTPClient, plan: LoadPlan, body: bytes, rec: RequestRecord) -> None:
    """Send one streaming request and fill ``rec``; raises only RunStopped/RequestDeadline."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "X-Request-Id": rec.request_id,
    }
    rec.send_time = time.monotonic()
    try:
        try:
            resp = client.request("POST", plan.path, body=body, headers=headers)
        except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError):
            # A kept-alive connection the server closed just before we wrote on it (llama-server
            # did this to ~1 request in 8): the request never reached it, so send it once more on
            # a fresh connection, timed from the new send. A second failure is recorded.
            rec.send_time = time.monotonic()
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
            t = time.monotonic()
            if not line:
                break
            parser.feed_line(line, t)
            if parser.done:
                break
        parser.finish()  # raises StreamError for an empty or cut-short stream
        rec.end_time = time.monotonic()
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
    rec.end_time = time.monotonic()
