"""Entry point of a load process: Locust in library mode, stopping by itself.

    python -m quantbench.load.runner local  --plan PLAN.json --records OUT.jsonl
    python -m quantbench.load.runner master --plan PLAN.json --records OUT.jsonl --workers N
    python -m quantbench.load.runner worker --master-host HOST [--master-port 5557]
    python -m quantbench.load.runner template --fd FD


``local`` runs the whole plan in this process. ``master`` sends each connected worker its share
of the plan, starts them together, and writes the records they send back into one file.
``worker`` runs a share; it needs the master's address and the run's token (``$QB_LOAD_TOKEN`` or
``--token``), so it can run on another machine. The plan holds the request headers (an API key),
so the master sends it only to workers that presented the token, and refuses to run while any
other process is connected as a worker. Locust never exits on its own when its users are done: each mode stops itself once
every planned request has a record, or when the plan's time is up (requests still in flight
are then recorded as incomplete).

``template`` imports all this once and then forks a ``local`` run per plan its parent sends over
the socket ``FD`` (:mod:`quantbench.load.forkserver`: a bench pair's points without an import
each).

Progress goes to stderr every ``progress_interval_s``.
"""

from __future__ import annotations

# Locust monkey-patches sockets, ssl and threads with gevent when imported: it goes first.
import locust  # noqa: F401  isort: skip

import argparse
import gc
import hmac
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event
from locust.env import Environment

from quantbench.load.dispatch import Dispatcher
from quantbench.load.forkserver import serve
from quantbench.load.locustfile import StreamingUser, set_dispatcher
from quantbench.load.procs import TOKEN_ENV
from quantbench.load.records import RequestRecord, Tally
from quantbench.workloads.plan import LoadPlan

# Delay between "everyone is ready" and the first request, so all processes start together.
START_DELAY_S = 0.1
RECORD_FLUSH_S = 0.25


class _QuietSpawnRate(logging.Filter):
    # All users start at once on purpose; Locust warns about any spawn rate above 100.
    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate" not in record.getMessage()


logging.getLogger("locust.runners").addFilter(_QuietSpawnRate())


class Progress:
    """Counts records and prints a line now and then."""

    def __init__(self, point: str, expected: int | None, interval_s: float) -> None:
        self.point, self.expected, self.interval_s = point, expected, interval_s
        self.tally = Tally()
        self.t0 = time.monotonic()
        self._last_chunks = 0
        self._last_t = self.t0

    def add(self, rec: RequestRecord) -> None:
        self.tally.add(rec)

    def line(self, in_flight: int | None = None) -> str:
        now, t = time.monotonic(), self.tally
        rate = (t.chunks - self._last_chunks) / max(now - self._last_t, 1e-9)
        self._last_chunks, self._last_t = t.chunks, now
        total = f"/{self.expected}" if self.expected is not None else ""
        flight = f" in flight {in_flight}" if in_flight is not None else ""
        return (
            f"[{self.point}] {now - self.t0:6.1f}s  done {t.records}{total}  ok {t.completed}  "
            f"failed {t.failed}  incomplete {t.incomplete}{flight}  {rate:,.0f} chunks/s"
        )

    def loop(self, in_flight: Any = None) -> None:
        while True:
            gevent.sleep(self.interval_s)
            print(self.line(in_flight() if in_flight else None), file=sys.stderr, flush=True)


class LoopLag:
    """How late this process's event loop wakes a sleeping greenlet: the load generator's own
    delay in reading chunks. A busy client (a 2-core machine shared with the server) shows here,
    not in the server's figures."""

    def __init__(self, period_s: float = 0.01) -> None:
        self.period_s = period_s
        self.lags: list[float] = []

    def loop(self) -> None:
        while True:
            before = time.monotonic()
            gevent.sleep(self.period_s)
            self.lags.append(max(0.0, time.monotonic() - before - self.period_s))

    def summary(self) -> dict[str, float]:
        if not self.lags:
            return {}
        lags = sorted(self.lags)
        return {
            "samples": len(lags),
            "p50_ms": lags[len(lags) // 2] * 1000,
            "p99_ms": lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1000,
            "max_ms": lags[-1] * 1000,
        }


def write_meta(records_path: Path, meta: dict[str, Any]) -> None:
    """What the load process knows beyond its records (why it stopped, its own load)."""
    records_path.with_name(records_path.name + ".meta.json").write_text(
        json.dumps(meta), encoding="utf-8"
    )


def run_local(plan: LoadPlan, records_path: Path) -> int:
    progress = Progress(plan.point, None, plan.progress_interval_s)
    lag = LoopLag()
    cpu0, wall0 = time.process_time(), time.monotonic()
    with records_path.open("w", encoding="utf-8") as out:

        def sink(rec: RequestRecord) -> None:
            out.write(rec.to_json() + "\n")
            progress.add(rec)

        dispatcher = Dispatcher(plan, sink, worker=0)
        set_dispatcher(dispatcher)
        env = Environment(user_classes=[StreamingUser], host=plan.url)
        runner = env.create_local_runner()
        runner.start(plan.users, spawn_rate=plan.users)
        if runner.spawning_greenlet is not None:
            runner.spawning_greenlet.join()
        gc.freeze()  # keep the collector's pauses short: setup objects are never garbage
        dispatcher.start(time.monotonic() + START_DELAY_S)
        progress.t0 = dispatcher.t0
        printer = gevent.spawn(progress.loop, lambda: len(dispatcher.in_flight))
        watcher = gevent.spawn(lag.loop)
        dispatcher.finished.wait()
        watcher.kill()
        printer.kill()
        runner.quit()
    wall = time.monotonic() - wall0
    write_meta(
        records_path,
        {
            "stop_reason": dispatcher.stop_reason,
            "measured_started": dispatcher.measured_started,
            "client_cpu_s": time.process_time() - cpu0,
            "client_wall_s": wall,
            "loop_lag": lag.summary(),
        },
    )
    print(progress.line(0), file=sys.stderr, flush=True)
    return 0


def run_master(
    plan: LoadPlan,
    records_path: Path,
    workers: int,
    bind_host: str,
    bind_port: int,
    wait_workers_s: float,
    token: str | None = None,
) -> int:
    total = None
    progress = Progress(plan.point, total, plan.progress_interval_s)
    done_workers: set[str] = set()
    env = Environment(user_classes=[StreamingUser], host=plan.url)
    runner = env.create_master_runner(bind_host, bind_port)
    with records_path.open("w", encoding="utf-8") as out:

        def on_records(environment: Any, msg: Any, **_: Any) -> None:
            for data in msg.data:
                rec = RequestRecord.from_dict(data)
                out.write(rec.to_json() + "\n")
                progress.add(rec)

        def on_done(environment: Any, msg: Any, **_: Any) -> None:
            done_workers.add(msg.node_id)

        trusted: set[str] = set()

        def on_hello(environment: Any, msg: Any, **_: Any) -> None:
            if token is None or hmac.compare_digest(str(msg.data.get("token", "")), token):
                trusted.add(msg.node_id)

        runner.register_message("qb_records", on_records)
        runner.register_message("qb_done", on_done)
        runner.register_message("qb_hello", on_hello)

        deadline = time.monotonic() + wait_workers_s
        while len(trusted & set(runner.clients)) < workers:
            if time.monotonic() > deadline:
                print(
                    f"error: {len(trusted)} of {workers} workers connected to "
                    f"{bind_host}:{bind_port} with this run's token within {wait_workers_s:g} s",
                    file=sys.stderr,
                )
                runner.quit()
                return 2
            gevent.sleep(0.05)
        strangers = set(runner.clients) - trusted
        if strangers:
            print(
                f"error: {len(strangers)} process(es) connected to {bind_host}:{bind_port} as "
                "workers without this run's token; the plan (with its request headers) is not "
                "sent to them, and the run stops",
                file=sys.stderr,
            )
            runner.quit()
            return 2
        ids = sorted(trusted)
        for i, client_id in enumerate(ids):
            runner.send_message(
                "qb_plan", {"plan": plan.share(i, len(ids)).to_dict()}, client_id=client_id
            )
        spawned = Event()
        env.events.spawning_complete.add_listener(lambda user_count, **_: spawned.set())
        runner.start(plan.users, spawn_rate=plan.users)
        spawned.wait()
        # A delay, not a time: each worker starts on its own monotonic clock (one machine's
        # monotonic time means nothing on another).
        t0 = time.monotonic() + START_DELAY_S
        for client_id in ids:
            runner.send_message("qb_go", {"delay_s": START_DELAY_S}, client_id=client_id)
        progress.t0 = t0
        printer = gevent.spawn(progress.loop)
        hard_stop = t0 + plan.point_timeout_s + 60
        rc = 0
        while len(done_workers) < len(ids):
            if runner.worker_count < len(ids) - len(done_workers) or (
                hard_stop is not None and time.monotonic() > hard_stop
            ):
                print("error: a worker went missing before it finished", file=sys.stderr)
                rc = 1
                break
            gevent.sleep(0.05)
        printer.kill()
        runner.quit()
    print(progress.line(), file=sys.stderr, flush=True)
    return rc


def run_worker(master_host: str, master_port: int, token: str | None = None) -> int:
    env = Environment(user_classes=[StreamingUser])
    runner = env.create_worker_runner(master_host, master_port)
    runner.send_message("qb_hello", {"token": token or ""})
    pending: list[dict[str, Any]] = []
    holder: dict[str, Dispatcher] = {}

    def flush() -> None:
        if pending:
            batch = pending[:]
            pending.clear()
            runner.send_message("qb_records", batch)

    def flusher() -> None:
        dispatcher = holder["d"]
        while not dispatcher.finished.is_set():
            dispatcher.finished.wait(timeout=RECORD_FLUSH_S)
            flush()
        flush()
        runner.send_message("qb_done", {"records": dispatcher.tally.records})

    def on_plan(environment: Any, msg: Any, **_: Any) -> None:
        plan = LoadPlan.from_dict(msg.data["plan"])
        dispatcher = Dispatcher(plan, lambda rec: pending.append(rec.as_dict()), plan.share_index)
        holder["d"] = dispatcher
        set_dispatcher(dispatcher)

    def on_go(environment: Any, msg: Any, **_: Any) -> None:
        gc.freeze()
        holder["d"].start(time.monotonic() + float(msg.data["delay_s"]))
        gevent.spawn(flusher)

    runner.register_message("qb_plan", on_plan)
    runner.register_message("qb_go", on_go)
    runner.greenlet.join()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantbench.load.runner", description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    local = sub.add_parser("local", help="run a plan in this process")
    master = sub.add_parser("master", help="run a plan on worker processes")
    for p in (local, master):
        p.add_argument("--plan", type=Path, required=True, help="plan JSON written by the parent")
        p.add_argument("--records", type=Path, required=True, help="JSONL file to write")
    master.add_argument("--workers", type=int, required=True, help="workers to wait for")
    master.add_argument("--bind-host", default="127.0.0.1", help="address workers connect to")
    master.add_argument("--bind-port", type=int, default=5557)
    master.add_argument("--wait-workers-s", type=float, default=60.0)
    template = sub.add_parser("template", help="fork a local run per plan the parent sends")
    template.add_argument("--fd", type=int, required=True, help="the parent's Unix socket")
    worker = sub.add_parser("worker", help="run the share of a plan a master sends")
    worker.add_argument("--master-host", default="127.0.0.1")
    worker.add_argument("--master-port", type=int, default=5557)
    for p in (master, worker):
        p.add_argument(
            "--token",
            default=None,
            help=f"the run's worker token (default: ${TOKEN_ENV}; prefer the variable, a flag "
            "shows in `ps`)",
        )
    args = parser.parse_args(argv)
    token = args.token if getattr(args, "token", None) else os.environ.get(TOKEN_ENV)
    if args.mode == "worker":
        return run_worker(args.master_host, args.master_port, token)
    if args.mode == "template":
        return serve(args.fd, main)
    plan = LoadPlan.load(args.plan)
    if args.mode == "local":
        return run_local(plan, args.records)
    return run_master(
        plan, args.records, args.workers, args.bind_host, args.bind_port, args.wait_workers_s, token
    )


if __name__ == "__main__":
    sys.exit(main())
