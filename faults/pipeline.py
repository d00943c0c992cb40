"""`dvc repro` interrupted during a benchmark: nothing left running, nothing half-written, and the
next `dvc repro` runs only what did not finish.

The scenario builds a two-stage DVC project in a temporary folder: `first` writes a small result,
`second` is a benchmark stage written exactly as `stages/bench.py` writes its folder
(`quantbench.bench.stage.run_pair_to`: SIGTERM as an interrupt, around the atomic folder, around
`run_pair()`), here on the stand-in engine. It starts `dvc repro` in
a process group of its own, as a terminal would, waits until the benchmark's server is answering
load, and sends SIGINT (what Ctrl-C sends to the foreground group) or SIGTERM to that group.

This module is also the stage's entry point:

    python -m faults.pipeline --out second --workdir DIR
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from faults.engine import StandinEngine, StandinSettings
from faults.pairs import job_for, workload
from faults.scenario import Checks, Context, Outcome, describe, kill_leftovers
from faults.standin import count_lines
from quantbench.bench.spec import BenchSettings
from quantbench.bench.stage import run_pair_to
from quantbench.engines.artifact import Artifact
from quantbench.errors import run_main
from quantbench.load.records import read_records
from quantbench.progress import setup_logging

DVC_YAML = """\
stages:
  first:
    cmd: python -c "import pathlib; p = pathlib.Path('first'); p.mkdir(exist_ok=True); (p / 'result.txt').write_text('done')"
    outs:
      - first
  second:
    cmd: python -m faults.pipeline --out second --workdir {workdir}
    deps:
      - first
    outs:
      - second
"""


def stage_main() -> None:
    parser = argparse.ArgumentParser(description="a benchmark stage on the stand-in engine")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    setup_logging()
    workdir = args.workdir / f"run-{os.getpid()}"
    engine = StandinEngine(workdir)
    job = job_for(
        engine,
        Artifact("tiny", "bf16", workdir),
        StandinSettings(),
        workload(
            load=[
                {"kind": "concurrency", "concurrency": 1, "num_requests": 4},
                {"kind": "concurrency", "concurrency": 2, "num_requests": 12},
            ]
        ),
        BenchSettings(),
    )
    summary = run_pair_to(job, args.out)  # as the bench stage writes its folder
    print(f"second: {len(summary.rows)} rows")


def _default_sigint() -> None:
    """Ctrl-C as a terminal delivers it: a job started in the background of a non-interactive
    shell (CI runners do this) inherits SIGINT *ignored*, and Python then never raises
    KeyboardInterrupt; reset it so the scenario tests what a user's Ctrl-C does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _latest_launch(work: Path) -> Path | None:
    runs = sorted(work.glob("run-*/launch-0"), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return status != "Z"


def dvc_interrupted(sig: signal.Signals) -> Callable[[Context], Outcome]:
    def scenario(ctx: Context) -> Outcome:
        proj, work = ctx.dir / "project", ctx.dir / "work"
        proj.mkdir(parents=True, exist_ok=True)
        bin_dir = str(Path(sys.executable).parent)
        env = ctx.env(
            PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            DVC_NO_ANALYTICS="1",
            DVC_SITE_CACHE_DIR=str(ctx.dir / "dvc-site-cache"),
        )
        dvc = [str(Path(bin_dir) / "dvc")]
        subprocess.run([*dvc, "init", "--no-scm", "-q"], cwd=proj, env=env, check=True, timeout=120)
        (proj / "dvc.yaml").write_text(DVC_YAML.format(workdir=work), encoding="utf-8")
        chk = Checks()

        # 1. dvc repro, interrupted once the benchmark's server is answering load
        log1 = ctx.dir / "repro-interrupted.log"
        with log1.open("wb") as out:
            proc = subprocess.Popen(
                [*dvc, "repro"], cwd=proj, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_default_sigint,
            )  # fmt: skip
        server_pid = None
        try:
            deadline = time.monotonic() + 120
            launch = None
            while time.monotonic() < deadline and proc.poll() is None:
                launch = _latest_launch(work)
                if launch is not None and count_lines(launch / "truth.jsonl") >= 3:
                    break
                time.sleep(0.05)
            if not chk.that(
                proc.poll() is None and launch is not None,
                f"dvc repro ended before the benchmark ran (rc {proc.poll()}); see {log1}",
            ):
                return chk.outcome("not interrupted")
            assert launch is not None
            server_pid = int((launch / "server.pid").read_text())
            first_result = proj / "first" / "result.txt"
            first_before = first_result.stat().st_mtime_ns if first_result.is_file() else None
            os.killpg(proc.pid, sig)
            t_signal = time.monotonic()
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        leftovers = ctx.orphans(grace_s=20)  # the stage may outlive dvc while it cleans up
        settled = time.monotonic() - t_signal
        chk.that(not leftovers, f"left running after the interrupt: {describe(leftovers)}")
        kill_leftovers(leftovers)
        chk.that(not _alive(server_pid), f"benchmark server {server_pid} still running")
        chk.that(rc != 0, f"interrupted dvc repro exited {rc}")
        chk.that(first_before is not None, "stage 'first' had not finished before the interrupt")
        chk.that(not (proj / "second").exists(), "half-written output 'second' exists")
        temps = [p.name for p in proj.glob(".second.tmp-*")]
        chk.that(not temps, f"temporary output left: {temps}")
        lock = (
            yaml.safe_load((proj / "dvc.lock").read_text()) if (proj / "dvc.lock").is_file() else {}
        )
        stages = sorted((lock or {}).get("stages", {}))
        chk.that(stages == ["first"], f"dvc.lock holds {stages}, expected only 'first'")

        # 2. the next dvc repro resumes: 'first' kept, only 'second' runs
        resumed = subprocess.run(
            [*dvc, "repro"], cwd=proj, env=env, capture_output=True, text=True, timeout=300,
            start_new_session=True,
        )  # fmt: skip
        (ctx.dir / "repro-resumed.log").write_text(resumed.stdout + resumed.stderr)
        text = resumed.stdout + resumed.stderr
        chk.that(resumed.returncode == 0, f"resumed dvc repro exited {resumed.returncode}")
        chk.that("Running stage 'first'" not in text, "the resumed run re-ran 'first'")
        chk.that("Running stage 'second'" in text, "the resumed run did not run 'second'")
        first_after = first_result.stat().st_mtime_ns if first_result.is_file() else None
        lost = int(first_after is None or first_after != first_before)
        chk.that(lost == 0, "the finished stage's output was lost or rewritten")
        records = [r for p in (proj / "second").glob("**/records.jsonl") for r in read_records(p)]
        chk.that(
            (proj / "second" / "summary.json").is_file() and len(records) > 0,
            "the resumed stage wrote no summary",
        )
        status = subprocess.run(
            [*dvc, "status"], cwd=proj, env=env, capture_output=True, text=True, timeout=120
        )
        chk.that(
            "up to date" in status.stdout, f"dvc status after resume: {status.stdout.strip()!r}"
        )
        return chk.outcome(
            f"{sig.name} to dvc's group; rc {rc}; settled in {settled:.1f} s: server "
            f"{server_pid} gone, 0 processes left, 'second' absent, dvc.lock {stages}; "
            "next repro ran only 'second', 'first' kept; dvc status up to date",
            requests=len(records),
            failed_requests=sum(1 for r in records if r.status != "completed"),
            orphans=len(leftovers),
            lost=lost,
        )

    return scenario


if __name__ == "__main__":
    run_main(stage_main)
