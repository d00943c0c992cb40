"""Server faults: each runs a benchmark pair whose first server point misbehaves.

Every scenario checks, beyond its own expectation: the faulty point's rows fail their SLOs (or
carry the error), every failed request has a reason, the healthy server point after it is
measured in full, nothing the servers finished is missing from the outputs, and (checked by the
runner) no process is left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import psutil

from faults.engine import HEALTHY, Fault, StandinEngine
from faults.pairs import PairRun, failed_reasons, run_standin_pair, workload
from faults.scenario import Checks, Context, Outcome, Scenario
from faults.standin import count_lines
from quantbench.bench.spec import BenchSettings, SearchSettings
from quantbench.mock_server import Behaviour


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _short(text: str | None, n: int = 90) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 3] + "..."


def finish(chk: Checks, run: PairRun, observed: str, *, faulty_fails: bool = True) -> Outcome:
    """The checks every server scenario shares, then the outcome."""
    healthy = run.rows(False)
    n_load = len(run.rows(True))
    ok_rows = [r for r in healthy if r["error"] is None and r["failed"] == 0 and r["completed"] > 0]
    chk.that(
        bool(healthy) and len(ok_rows) == len(healthy),
        f"healthy server point not measured in full: {[(r['load_point'], r['completed'], r['error']) for r in healthy]}",
    )
    faulty = run.rows(True)
    chk.that(bool(faulty), "the faulty server point has no rows in the report")
    affected = [r for r in faulty if r["error"] or r["failed"] or r["incomplete"]]
    chk.that(
        not faulty_fails or bool(affected), "no row of the faulty server point shows the fault"
    )
    chk.that(
        all(r["slo_passed"] is False for r in affected),
        f"a point hit by the fault passed its SLOs: {[r['load_point'] for r in affected if r['slo_passed'] is not False]}",
    )
    records = run.records()
    unexplained = [r.request_id for r in records if r.status != "completed" and not r.error]
    chk.that(not unexplained, f"failed requests without a reason: {unexplained[:5]}")
    lost = run.lost()
    chk.that(lost == 0, f"{lost} result(s) lost")
    chk.that((run.out / "summary.json").is_file(), "summary.json not written")
    failed = sum(1 for r in records if r.status != "completed")
    return chk.outcome(
        f"{observed}; healthy point {sum(r['completed'] for r in healthy)}/"
        f"{sum(r['requests'] for r in healthy)} ok ({n_load} faulty rows, {len(healthy)} healthy)",
        requests=len(records),
        failed_requests=failed,
        lost=lost,
    )


def _wait_lines(engine: StandinEngine, lines: int, timeout_s: float = 60) -> int | None:
    """Wait until the first (faulty) server has logged `lines` finished requests; its PID."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine.launches:
            launch = engine.launches[0]
            if count_lines(launch.truth_log) >= lines:
                return launch.pid()
        time.sleep(0.01)
    return None


def _kill_after(lines: int, then_path: Path | None = None):  # type: ignore[no-untyped-def]
    """SIGKILL the faulty server once it has logged `lines` finished requests (warm-up included)
    and, if given, once `then_path` exists."""

    def inject(engine: StandinEngine, notes: list[str]) -> None:
        pid = _wait_lines(engine, lines)
        deadline = time.monotonic() + 60
        while then_path is not None and not then_path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            notes.append(f"SIGKILL to PID {pid} after {lines - 1} requests")

    return inject


# -- the scenarios -----------------------------------------------------------------------------


def crash_mid_run(ctx: Context) -> Outcome:
    # warm-up + c1 (4) + 4 of c2's 6: killed with c2's last requests in flight or about to go
    run = run_standin_pair(ctx, Fault(), inject=_kill_after(1 + 4 + 4))
    chk = Checks()
    c1, c2 = run.rows(True)
    chk.that(bool(run.injector_note), "the server was never killed")
    chk.that(
        c1["error"] is None and c1["completed"] == 4,
        f"c1, measured before the crash, was lost: {c1['error']}",
    )
    chk.that("killed by SIGKILL" in (c2["error"] or ""), f"c2 error is {c2['error']!r}")
    chk.that("SIGKILL" in (run.server(True)["report"]["exit"] or ""), "server exit not recorded")
    reasons = failed_reasons(run.records(True))
    return finish(
        chk,
        run,
        f"{'; '.join(run.injector_note)}: c1 kept ({c1['completed']}/4 ok); c2 error "
        f"'{_short(c2['error'], 60)}', {c2['completed']} ok + {c2['failed']} failed "
        f"({_short(next(iter(reasons), '-'), 40)})",
    )


def crash_during_search(ctx: Context) -> Outcome:
    search = SearchSettings(kind="concurrency", start=1, max=4, num_requests=4)
    run = run_standin_pair(
        ctx,
        Fault(),
        bench=BenchSettings(mode="search", search=search),
        # once c1 and c2 are judged: the c4 search point's folder is made before its load starts
        inject=_kill_after(1 + 4 + 4, then_path=ctx.dir / "out" / "faulty=on" / "faults" / "c4"),
    )
    chk = Checks()
    faulty = run.rows(True)
    kept = [r for r in faulty if r["error"] is None and r["completed"] == 4]
    chk.that(
        [r["load_point"] for r in kept][:2] == ["c1", "c2"],
        f"search points measured before the crash were lost: {[r['load_point'] for r in faulty]}",
    )
    errors = [r["error"] for r in faulty if r["error"]]
    chk.that(any("killed by SIGKILL" in e for e in errors), f"no row names the kill: {errors}")
    searches = run.server(False)["search"] or {}  # per workload: this run has one
    edge = next(iter(searches.values()), {}).get("edge")
    chk.that(edge == 4, f"healthy point's search edge is {edge}, expected 4")
    return finish(
        chk,
        run,
        f"{'; '.join(run.injector_note)}: search rows {[r['load_point'] for r in kept]} kept, "
        f"'{_short(errors[0] if errors else '-', 50)}'; healthy search edge c{edge:g}",
    )


def oom_killed(ctx: Context) -> Outcome:
    spec = workload(
        load=[
            {"kind": "concurrency", "concurrency": 1, "num_requests": 4},
            {"kind": "concurrency", "concurrency": 2, "num_requests": 16},
        ]
    )
    # allocates once c2's first two requests are done, dies two requests later
    run = run_standin_pair(ctx, Fault(oom_after_requests=1 + 4 + 2, oom_mb=256), spec=spec)
    chk = Checks()
    c1, c2 = run.rows(True)
    report = run.server(True)["report"]
    chk.that(c1["error"] is None and c1["completed"] == 4, f"c1 lost: {c1['error']}")
    chk.that(
        "killed by SIGKILL (killed: out of memory?" in (c2["error"] or ""),
        f"c2 error does not name SIGKILL/OOM: {c2['error']!r}",
    )
    peak = report["peak_rss_bytes"] or 0
    chk.that(peak >= 200 << 20, f"peak RSS {peak >> 20} MiB, expected the 256 MiB allocation")
    return finish(
        chk,
        run,
        f"c2: '{_short(c2['error'], 75)}'; exit '{report['exit']}'; peak RSS {peak >> 20} MiB",
    )


def hang_after_warmup(ctx: Context) -> Outcome:
    hang = Behaviour(name="hang", hang=True)
    spec = workload(
        timeout_s=1,
        load=[
            {"kind": "concurrency", "concurrency": 1, "num_requests": 2},
            {"kind": "concurrency", "concurrency": 2, "num_requests": 4},
        ],
    )
    run = run_standin_pair(ctx, Fault(behaviours=(HEALTHY, *[hang] * 50)), spec=spec)
    chk = Checks()
    records = run.records(True)
    timeouts = [
        r
        for r in records
        if r.status == "failed" and (r.error or "").startswith("timeout: no response within 1 s")
    ]
    chk.that(
        len(timeouts) == len(records) == 6,
        f"{len(timeouts)} of {len(records)} requests timed out, expected 6 of 6",
    )
    reasons = [reason for r in run.rows(True) for reason in r["slo_reasons"]]
    return finish(
        chk,
        run,
        f"{len(timeouts)}/{len(records)} requests failed '{_short(timeouts[0].error if timeouts else '-', 40)}'; "
        f"SLO: {_short(reasons[0] if reasons else '-', 40)}",
    )


def hang_from_start(ctx: Context) -> Outcome:
    spec = workload(timeout_s=1)
    run = run_standin_pair(ctx, Fault(behaviours=(Behaviour(name="hang", hang=True),)), spec=spec)
    chk = Checks()
    faulty = run.rows(True)
    chk.that(
        all("failed its warm-up request" in (r["error"] or "") for r in faulty),
        f"faulty rows: {[r['error'] for r in faulty]}",
    )
    return finish(chk, run, f"both points: '{_short(faulty[0]['error'] if faulty else '-', 80)}'")


def malformed_events(ctx: Context) -> Outcome:
    bad = Behaviour(name="malformed", ttft_ms=5, itl_ms=30, malformed_after_tokens=2)
    run = run_standin_pair(ctx, Fault(behaviours=(HEALTHY, bad)))
    chk = Checks()
    records = run.records(True)
    failed = [r for r in records if r.status == "failed"]
    chk.that(len(failed) == 5, f"{len(failed)} failed, expected 5 of 10 (every other request)")
    chk.that(
        all(
            (r.error or "").startswith("unreadable event:") and len(r.chunk_times) == 2
            for r in failed
        ),
        f"reasons: {failed_reasons(failed)}",
    )
    return finish(
        chk,
        run,
        f"{len(failed)}/{len(records)} failed '{_short(failed[0].error if failed else '-', 45)}', "
        "2 tokens before it kept",
    )


def http_5xx(ctx: Context) -> Outcome:
    run = run_standin_pair(
        ctx, Fault(behaviours=(HEALTHY, HEALTHY, Behaviour(name="503", status=503)))
    )
    chk = Checks()
    # every request the server saw, cool-down ones included (a 503 may land on any of them)
    records = run.records(True, phases=("warmup", "measured", "cooldown"))
    failed = {
        r.request_id
        for r in records
        if r.status == "failed" and (r.error or "").startswith("HTTP 503: ")
    }
    truth = [json.loads(x) for x in run.launch(True).truth_log.read_text().splitlines()]
    # a cool-down filler the point's stop cut before its answer was read is recorded as such
    # (incomplete, with that reason), whatever the server had sent
    cut = {r.request_id for r in records if r.phase == "cooldown" and r.status == "incomplete"}
    served_503 = {t["request_id"] for t in truth if t.get("status") == 503} - cut
    chk.that(
        bool(served_503) and failed == served_503,
        f"503s served {sorted(served_503)} != recorded {sorted(failed)}",
    )
    chk.that(
        all(
            r.status == "completed"
            for r in records
            if r.request_id not in served_503 and r.phase != "cooldown"
        ),
        "a request the server answered was not recorded as completed",
    )
    example = next((r.error for r in records if r.request_id in failed), "-")
    return finish(
        chk,
        run,
        f"{len(failed)}/{len(records)} failed, exactly the 503s served: '{_short(example, 50)}'",
    )


def stream_cut(ctx: Context) -> Outcome:
    cut = Behaviour(name="cut", ttft_ms=5, itl_ms=30, close_after_tokens=3)
    run = run_standin_pair(ctx, Fault(behaviours=(HEALTHY, cut)))
    chk = Checks()
    records = run.records(True)
    failed = [r for r in records if r.status == "failed"]
    chk.that(len(failed) == 5, f"{len(failed)} failed, expected 5")
    chk.that(
        all(
            (r.error or "").startswith("stream broken after 3 chunks") and len(r.chunk_times) == 3
            for r in failed
        ),
        f"reasons: {failed_reasons(failed)}",
    )
    return finish(
        chk,
        run,
        f"{len(failed)}/{len(records)} failed '{_short(failed[0].error if failed else '-', 50)}', 3 chunks kept",
    )


def slow_start(ctx: Context) -> Outcome:
    run = run_standin_pair(ctx, Fault(startup_delay_s=120, startup_timeout_s=2))
    chk = Checks()
    faulty = run.rows(True)
    chk.that(
        all(
            "not ready after 2 s (engines.standin.startup_timeout_s)" in (r["error"] or "")
            for r in faulty
        ),
        f"faulty rows: {[r['error'] for r in faulty]}",
    )
    chk.that(not _alive(run.launch(True).pid()), "the slow server was not stopped")
    return finish(
        chk,
        run,
        f"both points: '{_short(faulty[0]['error'] if faulty else '-', 75)}'; server stopped",
    )


def exit_at_start(ctx: Context) -> Outcome:
    run = run_standin_pair(ctx, Fault(exit_code=7))
    chk = Checks()
    faulty = run.rows(True)
    errors = [r["error"] or "" for r in faulty]
    chk.that(
        all(
            "exit code 7 during start-up" in e and "fatal: cannot load model weights" in e
            for e in errors
        ),
        f"faulty rows: {errors}",
    )
    return finish(
        chk,
        run,
        f"both points: '{_short(errors[0] if errors else '-', 45)}' + log tail 'fatal: cannot load model weights'",
    )


def port_taken(ctx: Context) -> Outcome:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        run = run_standin_pair(ctx, Fault(port=port))
    chk = Checks()
    faulty = run.rows(True)
    errors = [r["error"] or "" for r in faulty]
    chk.that(
        all(f"port {port} on 127.0.0.1 is already in use" in e and "ss -ltnp" in e for e in errors),
        f"faulty rows: {errors}",
    )
    chk.that(run.launch(True).pid() is None, "a server was started on the taken port")
    return finish(
        chk, run, f"both points: '{_short(errors[0] if errors else '-', 70)}'; nothing started"
    )


def tree_reaped(ctx: Context) -> Outcome:
    run = run_standin_pair(ctx, Fault(workers=True))
    chk = Checks()
    launch = run.launch(True)
    pids = [launch.pid(), *launch.worker_pids()]
    chk.that(len(pids) == 4 and None not in pids, f"expected server + 3 workers, got PIDs {pids}")
    alive = [p for p in pids if _alive(p)]
    chk.that(not alive, f"still alive after teardown: {alive}")
    faulty = run.rows(True)
    chk.that(all(r["error"] is None for r in faulty), f"errors: {[r['error'] for r in faulty]}")
    return finish(
        chk,
        run,
        f"server {pids[0]} + workers {pids[1:]} (one SIGTERM-proof in the group, one in its own "
        f"session, one grandchild): {len(pids) - len(alive)}/{len(pids)} gone",
        faulty_fails=False,  # the workers do not disturb serving: its points pass
    )


def unknown_engine_argument(ctx: Context) -> Outcome:
    run = run_standin_pair(ctx, Fault(extra_args=("--max-num-seqz", "8")))
    chk = Checks()
    errors = [r["error"] or "" for r in run.rows(True)]
    chk.that(
        all(
            "exit code 2 during start-up" in e and "unrecognized arguments: --max-num-seqz 8" in e
            for e in errors
        ),
        f"faulty rows: {errors}",
    )
    return finish(
        chk,
        run,
        "both points: 'mock server exit code 2 during start-up' + the engine's own 'error: unrecognized arguments: --max-num-seqz 8'",
    )


SCENARIOS = [
    Scenario(
        "crash-sigkill",
        "server",
        "server crashes mid-run (SIGKILL)",
        "SIGKILL to the server's PID from outside once its truth log shows 8 finished requests "
        "(c1 done, c2 half-way)",
        "c1 kept; c2 row error 'killed by SIGKILL', its failed requests with reasons; next server point runs",
        crash_mid_run,
    ),
    Scenario(
        "crash-search",
        "server",
        "server crashes during an SLO-edge search",
        "bench.mode: search; SIGKILL once the c1 and c2 search points are done",
        "c1, c2 search rows kept; a row names the kill; healthy point finds its edge",
        crash_during_search,
    ),
    Scenario(
        "oom",
        "server",
        "server OOM-killed under memory pressure",
        "stand-in allocates 256 MiB mid-run, then SIGKILLs itself as the kernel's OOM killer would "
        "(simulated: no cgroup limit)",
        "c2 error 'killed by SIGKILL (killed: out of memory? check dmesg)'; peak RSS shows the growth",
        oom_killed,
    ),
    Scenario(
        "hang",
        "server",
        "server hangs (accepts, never streams)",
        "mock server behaviour hang=True for every load request; workload timeout_s: 1",
        "every request failed 'timeout: no response within 1 s'; points fail their SLO; run goes on",
        hang_after_warmup,
    ),
    Scenario(
        "hang-warmup",
        "server",
        "server hangs from its first request",
        "hang=True for every request, the warm-up included; timeout_s: 1",
        "warm-up fails after 1 s: both points recorded failed with the reason; next point runs",
        hang_from_start,
    ),
    Scenario(
        "malformed",
        "server",
        "server streams malformed events",
        "every other request gets an event that is not JSON after 2 tokens (mock server "
        "malformed_after_tokens)",
        "those requests failed 'unreadable event: ...', the 2 tokens before kept",
        malformed_events,
    ),
    Scenario(
        "http-5xx",
        "server",
        "server returns 5xx for some requests",
        "every third request answered HTTP 503 (mock server status: 503)",
        "exactly the 503'd requests failed 'HTTP 503: ...'; the others completed",
        http_5xx,
    ),
    Scenario(
        "stream-cut",
        "server",
        "server closes streams mid-way",
        "every other request: connection aborted after 3 tokens (close_after_tokens: 3)",
        "those failed 'stream broken after 3 chunks', the 3 chunks kept",
        stream_cut,
    ),
    Scenario(
        "slow-start",
        "server",
        "server starts too slowly",
        "stand-in sleeps 120 s before listening; startup_timeout_s: 2",
        "'not ready after 2 s (engines.standin.startup_timeout_s)' + log tail; server stopped",
        slow_start,
    ),
    Scenario(
        "exit-at-start",
        "server",
        "server exits at start-up",
        "stand-in prints 'fatal: cannot load model weights' and exits 7",
        "'exit code 7 during start-up' with the log tail, at once (not after the deadline)",
        exit_at_start,
    ),
    Scenario(
        "port-taken",
        "server",
        "port already taken",
        "a socket listens on the port the server is launched on",
        "'port N on 127.0.0.1 is already in use ... ss -ltnp' before anything starts",
        port_taken,
    ),
    Scenario(
        "process-tree",
        "server",
        "server's process tree fully reaped",
        "stand-in spawns workers like vLLM: one ignoring SIGTERM in its group, one in its own "
        "session (setsid) with a child",
        "server, workers and grandchild all gone after teardown",
        tree_reaped,
    ),
    Scenario(
        "unknown-engine-arg",
        "input",
        "unknown engine setting",
        "engines.<engine>.extra_args: [--max-num-seqz, 8] reach the server's command line",
        "the engine's own 'unrecognized arguments' error in the report; exit code 2",
        unknown_engine_argument,
    ),
]
