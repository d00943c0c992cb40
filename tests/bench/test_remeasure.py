"""The decide stage's servers (quantbench.bench.remeasure.RowServers): started side by side."""

from __future__ import annotations

import dataclasses
import sys
import time
import urllib.request
from pathlib import Path

from quantbench.bench.job import workloads_job
from quantbench.bench.remeasure import RowServers
from quantbench.bench.spec import BenchSettings
from quantbench.engines.base import LaunchSpec
from quantbench.slo import NO_SLO

from .conftest import FakeEngine, FakeSettings
from .test_stage import CHAT

START_S = 2.0


class SlowStartEngine(FakeEngine):
    """The fake engine whose server takes ``START_S`` to come up, as an engine importing itself."""

    def launch(self, artifact, settings: FakeSettings, host: str, port: int) -> LaunchSpec:
        spec = super().launch(artifact, settings, host, port)
        code = (
            f"import os, sys, time; time.sleep({START_S}); os.execv(sys.executable, {spec.argv!r})"
        )
        return dataclasses.replace(spec, argv=[sys.executable, "-c", code])


def test_the_servers_a_duel_needs_start_side_by_side(fake_artifact, tmp_path: Path) -> None:
    # Each duel of the decide stage started its two servers one after the other, as each was
    # first measured: two vLLM starts are a minute on 2 cores, mostly each importing itself
    engine = SlowStartEngine(tmp_path)
    bench = BenchSettings()
    jobs = {
        name: workloads_job(
            name, fake_artifact, engine, FakeSettings(), {"chat": CHAT}, NO_SLO, bench
        )
        for name in ("a", "b")
    }
    servers = RowServers(jobs, tmp_path / "out")
    try:
        needed = {("a", "default"), ("b", "default")}
        assert servers.start_s(needed, {("a", "default"): 30.0, ("b", "default"): 20.0}) == 50.0
        servers.start(needed)
        assert set(servers.running) == needed
        first, second = sorted(servers.running.values(), key=lambda s: s.started_at)
        ready = first.report()["ready_seconds"]
        assert ready is not None and ready >= START_S
        # the second began before the first was ready: side by side, not one after the other
        assert second.started_at < first.started_at + ready
        assert servers.start_s(needed, {}) == 0.0  # nothing left to start
        # and both still serve once start() returned: started from worker threads, each server's
        # guard was told its parent died when its thread ended, and stopped it (the default
        # run's decide stage lost both vLLM servers of its first duel so)
        time.sleep(1.5)
        for server in servers.running.values():
            assert server.process is not None and server.process.poll() is None
            with urllib.request.urlopen(f"{server.spec.base_url}/health", timeout=5) as reply:
                assert reply.status == 200
    finally:
        servers.close()
    assert all(
        s.process is not None and s.process.poll() is not None for s in servers.used.values()
    )
