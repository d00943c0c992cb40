"""Harness ceiling: how much streamed load one load process (and 2 workers) can measure.

Not a test. Runs closed loops of rising concurrency against a zero-delay fake server (every token
written as soon as the last) and prints, per point, the streamed tokens/s and requests/s the
harness sustained and how late it saw chunks compared with the server's own write times. Where
that delay's p99 passes 5 ms (the accuracy budget of the tests) the load process has become the
bottleneck: its figure just before is the ceiling.

    python benchmarks/harness_ceiling.py [--tokens 64] [--seconds 4] [--concurrency 1,4,16,64,128]

The fake server runs on the same machine and takes CPU too: on a 2-core machine the figures are a
lower bound of what the harness does against a server elsewhere.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from quantbench.load.session import build_traffic, plan_point, run_plan
from quantbench.mock_server import Behaviour, MockServerProcess, Script
from quantbench.workloads.spec import RandomPrompts, WorkloadSpec

DELAY_BUDGET_MS = 5.0


def measure(url: str, truth_log: Path, concurrency: int, workers: int, args: argparse.Namespace,
            workdir: Path) -> dict[str, float]:  # fmt: skip
    spec = WorkloadSpec(
        prompts=RandomPrompts(input_len=8, output_len=args.tokens),
        load=[{"kind": "concurrency", "concurrency": concurrency}],  # type: ignore[list-item]
        duration_s=args.seconds,
        warmup_s=0.5,
        workers=workers,
        progress_interval_s=60,
    )
    traffic = build_traffic(spec, None)
    plan = plan_point(spec, 0, traffic, url=url, model="mock-model", engine="mock", headers={})
    start = truth_log.stat().st_size if truth_log.exists() else 0
    records = run_plan(plan, workdir / f"rec-{concurrency}-{workers}.jsonl", workers, workdir)
    with truth_log.open(encoding="utf-8") as f:
        f.seek(start)
        import json

        truth = {t["request_id"]: t for t in map(json.loads, f) if t.get("request_id")}
    measured = [r for r in records if r.phase == "measured"]
    done = [r for r in measured if r.status == "completed"]
    t0 = min(r.send_time for r in measured)
    t1 = max(r.end_time for r in measured if r.end_time)
    delays = [
        (a - b) * 1000
        for r in done
        if r.request_id in truth
        for a, b in zip(r.chunk_times, truth[r.request_id]["chunk_times"], strict=False)
    ]
    chunks = sum(len(r.chunk_times) for r in measured)
    return {
        "tok_s": chunks / (t1 - t0),
        "req_s": len(done) / (t1 - t0),
        "delay_p50": float(np.percentile(delays, 50)) if delays else float("nan"),
        "delay_p99": float(np.percentile(delays, 99)) if delays else float("nan"),
        "failed": sum(r.status == "failed" for r in records),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per point")
    parser.add_argument("--concurrency", default="1,4,16,64,128")
    parser.add_argument("--workers", default="0,2", help="0: one process; N: master + N workers")
    parser.add_argument(
        "--itl-ms",
        type=float,
        default=0.0,
        help="pace the server (0: zero-delay, the ceiling; 20: a model's pace)",
    )
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="qb-ceiling-") as tmp:
        work = Path(tmp)
        script = Script(
            behaviours=[
                Behaviour(ttft_ms=args.itl_ms, itl_ms=args.itl_ms, output_tokens=args.tokens)
            ]
        )
        with MockServerProcess(script, work / "server") as server:
            assert server.log_path is not None
            for workers in (int(w) for w in args.workers.split(",")):
                name = "1 load process" if workers == 0 else f"master + {workers} workers"
                pace = f"{args.itl_ms:g} ms between tokens" if args.itl_ms else "zero-delay"
                print(f"\n{name}, {args.tokens} tokens/request, {pace} fake server")
                print(f"{'streams':>8}{'tokens/s':>11}{'req/s':>9}{'delay p50':>11}{'p99 ms':>8}")
                best = None
                for c in (c for c in levels if c >= workers):
                    m = measure(server.url, server.log_path, c, workers, args, work)
                    ok = m["delay_p99"] <= DELAY_BUDGET_MS and not m["failed"]
                    print(f"{c:>8}{m['tok_s']:>11,.0f}{m['req_s']:>9,.1f}{m['delay_p50']:>11.2f}"
                          f"{m['delay_p99']:>8.2f}{'' if ok else '  (over budget)'}", flush=True)  # fmt: skip
                    if ok and (best is None or m["tok_s"] > best["tok_s"]):
                        best = {**m, "streams": c}
                if best:
                    print(f"ceiling within a {DELAY_BUDGET_MS:g} ms p99 delay: "
                          f"{best['tok_s']:,.0f} tokens/s, {best['req_s']:,.1f} req/s "
                          f"at {best['streams']} streams")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
