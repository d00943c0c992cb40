"""The pair probe's own logic: which setting it probes, and a server that does not serve."""

from __future__ import annotations

import json

import pytest
from tests.engines.test_server import spec as fake_spec
from tests.schemas import examples

from quantbench.engines.llamacpp import LlamaCppEngine, LlamaCppSettings
from quantbench.estimate.calibrate import read_pair_fits
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.machine import cpu_model
from quantbench.estimate.pair_probe import calibrate_pair, probe_point
from quantbench.schemas import io as schema_io


def test_the_probe_runs_the_setting_that_batches_most() -> None:
    label, settings = probe_point(LlamaCppEngine(), LlamaCppSettings(sweep={"parallel": [1, 8]}))
    assert (label, settings.parallel) == ("parallel=8", 8)


class _Dies(LlamaCppEngine):
    """llama.cpp's settings, and a server that exits at once (the fake engine's 'exit')."""

    def launch(self, artifact, settings, host, port):  # type: ignore[no-untyped-def]
        return fake_spec("exit", port)


def test_a_server_that_does_not_serve_is_recorded_not_fatal(tmp_path) -> None:
    probed = calibrate_pair(
        "x-llamacpp", "x", _Dies(), None, LlamaCppSettings(), "127.0.0.1", tmp_path
    )  # type: ignore[arg-type]
    assert probed.fit is None and probed.requests == []
    assert probed.error and "exit" in probed.error.lower()
    assert (tmp_path / "x-llamacpp.server.log").is_file()  # its log kept for the reader
    # the estimate leaves that pair to the roofline and keeps the others' probes
    folder = tmp_path / "pairs"
    schema_io.write(folder / "x-llamacpp.json", probed)
    good = examples.pair_calibration().model_copy(update={"cpu_model": cpu_model()})
    schema_io.write(folder / f"{good.pair}.json", good)
    fits = read_pair_fits(folder, ["x-llamacpp", good.pair, "never-probed"])
    assert list(fits) == [good.pair]
    assert json.loads((folder / "x-llamacpp.json").read_text())["fit"] is None


def test_a_probe_of_another_machine_is_refused(tmp_path) -> None:
    other = examples.pair_calibration().model_copy(update={"cpu_model": "Some Other CPU"})
    schema_io.write(tmp_path / f"{other.pair}.json", other)
    with pytest.raises(EstimateInputError, match=r"calibrate_pair@gguf-q4_k_m-llamacpp"):
        read_pair_fits(tmp_path, [other.pair])


def test_a_pair_not_to_probe_starts_no_server_and_says_why(tmp_path, monkeypatch) -> None:
    """`bench.pairs.<pair>.probe: false`: the record says what would have been probed and why it
    was not, no server is started, and the estimate leaves the pair to the roofline."""
    from quantbench.engines import server as server_mod

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a server was started for a pair not to probe")

    monkeypatch.setattr(server_mod.Server, "__enter__", refuse)
    probed = calibrate_pair(
        "x-llamacpp", "x", _Dies(), None, LlamaCppSettings(), "127.0.0.1", tmp_path,
        skip="bench.pairs.x-llamacpp.probe is false",
    )  # type: ignore[arg-type]  # fmt: skip
    assert probed.fit is None and probed.requests == [] and probed.error is None
    assert probed.skipped == "bench.pairs.x-llamacpp.probe is false"
    assert probed.server_point and probed.command  # what a probe would have started
    assert not (tmp_path / "x-llamacpp.server.log").exists()
    schema_io.write(tmp_path / "pairs" / "x-llamacpp.json", probed)
    assert read_pair_fits(tmp_path / "pairs", ["x-llamacpp"]) == {}


def test_a_version_1_pair_probe_reads_as_probed(tmp_path) -> None:
    """Version 2 added `skipped`: a version-1 file (every pair then was probed) reads unchanged."""
    good = examples.pair_calibration()
    data = json.loads(good.model_dump_json())
    data["schema_version"] = 1
    del data["skipped"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert schema_io.read(path, type(good), pair=good.pair) == good
