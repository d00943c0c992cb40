"""The estimate's probe of a pair's server, made by its bench on its own server: no server is
started for it, it runs on the setting that batches most, and a failure costs the pair its fit,
not its bench. Scripted servers: nothing here is held to a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.bench.resume import PartialStore
from quantbench.bench.run import run_pair
from quantbench.bench.spec import BenchSettings
from quantbench.estimate.spec import ProbeSettings
from quantbench.schemas import io as schema_io
from quantbench.schemas.machine import PairCalibration

from .conftest import FakeEngine, FakeSettings
from .test_run import job, no_fake_servers_left

pytestmark = pytest.mark.server

PROBE = ProbeSettings(repeats=1, max_batch=3, output_tokens=8)


class _Counted(FakeEngine):
    """The fake engine with a batch limit per setting (a slow setting serves one request at a
    time) and a count of its server launches."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.launches = 0

    def max_batch(self, settings: FakeSettings) -> int | None:
        return 1 if settings.itl_ms > 10 else None

    def launch(self, artifact, settings, host, port):  # type: ignore[no-untyped-def]
        self.launches += 1
        return super().launch(artifact, settings, host, port)


def _probed_job(engine, artifact, settings, **kw):  # type: ignore[no-untyped-def]
    pair = job(engine, artifact, settings, **kw)
    pair.probe = PROBE
    return pair


def test_the_bench_probes_its_own_server_at_the_setting_that_batches_most(
    fake_artifact, tmp_path
) -> None:
    engine = _Counted(tmp_path)
    settings = FakeSettings(sweep={"itl_ms": [40.0, 2.0]})  # the second batches most
    summary = run_pair(_probed_job(engine, fake_artifact, settings), tmp_path / "out")
    assert engine.launches == 2 == len(summary.servers)  # one start per setting, none for it
    probed = schema_io.read(tmp_path / "out" / PairCalibration.FILE, PairCalibration,
                            pair="tiny-fake")  # fmt: skip
    assert probed.server_point == "itl_ms=2.0" and probed.error is None
    assert probed.fit is not None and probed.fit.batch_measured == PROBE.max_batch
    assert sorted({r.concurrency for r in probed.requests}) == [1, 2, 3]
    (server,) = [s for s in summary.servers if s.server_point == "itl_ms=2.0"]
    assert probed.command == server.command  # the bench's own server
    assert all(r.error is None and r.completed for r in summary.rows)  # the points ran after it
    assert no_fake_servers_left(tmp_path)


def test_a_probe_whose_server_does_not_start_is_recorded_and_the_bench_goes_on(
    fake_engine, fake_artifact, tmp_path
) -> None:
    settings = FakeSettings(sweep={"crash": [True, False]})
    summary = run_pair(_probed_job(fake_engine, fake_artifact, settings), tmp_path / "out")
    probed = schema_io.read(tmp_path / "out/probe.json", PairCalibration, pair="tiny-fake")
    assert probed.server_point == "crash=on" and probed.fit is None
    assert probed.error and "no weights" in probed.error  # the server's own last words
    crashed, served = summary.servers
    assert crashed.error and served.error is None
    assert any(r.completed for r in summary.rows if r.server_point == "crash=off")


def test_without_a_probe_asked_none_is_made(fake_engine, fake_artifact, tmp_path) -> None:
    """The decide stage's measurements again, the fault table and the benchmarks run pairs
    without a probe (PairJob.probe is None): no file, no probe requests."""
    run_pair(job(fake_engine, fake_artifact, FakeSettings()), tmp_path / "out")
    assert not (tmp_path / "out/probe.json").exists()


def test_a_resumed_pair_keeps_its_probe_and_starts_no_server(fake_artifact, tmp_path) -> None:
    engine = _Counted(tmp_path)
    store = PartialStore("tiny-fake", "k1", root=tmp_path / "partial")
    store.open()
    first = _probed_job(engine, fake_artifact, FakeSettings(), bench=BenchSettings(race=False))
    first.store = store
    run_pair(first, tmp_path / "a")  # the stage interrupted after: the store is kept
    again = _probed_job(engine, fake_artifact, FakeSettings(), bench=BenchSettings(race=False))
    again.store = store
    run_pair(again, tmp_path / "b")
    assert engine.launches == 1  # every point resumed: no second start, no second probe
    assert (tmp_path / "a/probe.json").read_text() == (tmp_path / "b/probe.json").read_text()
