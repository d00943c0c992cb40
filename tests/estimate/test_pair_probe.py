"""The pair probe's own logic: which setting it probes, a server that fails under it, and how
the estimate reads what the bench stages probed."""

from __future__ import annotations

import json

import pytest
from tests.schemas import examples

from quantbench.engines.llamacpp import LlamaCppEngine, LlamaCppSettings
from quantbench.engines.server import ServerError
from quantbench.estimate.calibrate import read_pair_fits
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.machine import cpu_model
from quantbench.estimate.pair_probe import not_probed, probe_on, probe_point
from quantbench.schemas import io as schema_io
from quantbench.schemas.machine import PairCalibration


def test_the_probe_runs_the_setting_that_batches_most() -> None:
    label, settings = probe_point(LlamaCppEngine(), LlamaCppSettings(sweep={"parallel": [1, 8]}))
    assert (label, settings.parallel) == ("parallel=8", 8)


class _DyingServer:
    """A started server that dies at the probe's first request (its stream fails)."""

    class spec:
        model_name = "x"

        @staticmethod
        def redacted_argv() -> list[str]:
            return ["llama-server", "--port", "1"]

    def stream(self, body, timeout_s):  # type: ignore[no-untyped-def]
        raise ServerError("llama-server exited with code -9 (SIGKILL) before it answered")


def test_a_server_that_dies_under_the_probe_costs_its_fit_not_the_bench() -> None:
    probed = probe_on(
        "x-llamacpp", "x", LlamaCppEngine(), _DyingServer(), "parallel=4",  # type: ignore[arg-type]
        LlamaCppSettings(parallel=4),
    )  # fmt: skip
    assert probed.fit is None and probed.requests == [] and probed.skipped is None
    assert probed.error and "SIGKILL" in probed.error
    assert probed.command == ["llama-server", "--port", "1"]
    assert probed.cpu_model == cpu_model()


def _write(bench_dir, probed: PairCalibration) -> None:
    schema_io.write(bench_dir / probed.pair / PairCalibration.FILE, probed)


def test_the_estimate_reads_each_bench_stages_probe(tmp_path) -> None:
    """A pair whose probe failed or was not made is left to the roofline; the others' fits are
    read from their bench stage's folder (reports/bench/<pair>/probe.json)."""
    assert f"reports/bench/{{pair}}/{PairCalibration.FILE}" == PairCalibration.OUTPUT
    good = examples.pair_calibration().model_copy(update={"cpu_model": cpu_model()})
    failed = not_probed("x-llamacpp", "x", LlamaCppEngine(), "parallel=4",
                        LlamaCppSettings(parallel=4), [], error="ServerError: exit 1")  # fmt: skip
    resumed = not_probed("y-llamacpp", "y", LlamaCppEngine(), "parallel=4",
                         LlamaCppSettings(parallel=4), [], skipped="resumed")  # fmt: skip
    for probed in (good, failed, resumed):
        _write(tmp_path, probed)
    fits = read_pair_fits(tmp_path, ["x-llamacpp", good.pair, "y-llamacpp", "never-probed"])
    assert list(fits) == [good.pair] and fits[good.pair] == good.fit
    assert json.loads((tmp_path / "x-llamacpp/probe.json").read_text())["fit"] is None


def test_a_probe_of_another_machine_is_refused(tmp_path) -> None:
    other = examples.pair_calibration().model_copy(update={"cpu_model": "Some Other CPU"})
    _write(tmp_path, other)
    with pytest.raises(EstimateInputError, match=r"dvc repro bench@gguf-q4_k_m-llamacpp"):
        read_pair_fits(tmp_path, [other.pair])


def test_a_probe_is_used_on_the_device_it_was_made_on(tmp_path) -> None:
    """A server probed on the GPU times that GPU's pairs, not the CPU's, and the other way
    round (the same machine, runtime.device changed)."""
    on_gpu = examples.pair_calibration().model_copy(
        update={"cpu_model": cpu_model(), "gpu": "NVIDIA H100 80GB HBM3"}
    )
    _write(tmp_path, on_gpu)
    assert read_pair_fits(tmp_path, [on_gpu.pair], "NVIDIA H100 80GB HBM3") == {
        on_gpu.pair: on_gpu.fit
    }
    with pytest.raises(EstimateInputError, match="probed on 'NVIDIA H100 80GB HBM3'.*its CPU"):
        read_pair_fits(tmp_path, [on_gpu.pair])
    with pytest.raises(EstimateInputError, match="computes on 'NVIDIA L4'"):
        read_pair_fits(tmp_path, [on_gpu.pair], "NVIDIA L4")


def test_a_probe_records_the_gpu_its_server_computed_on(fake_gpu, monkeypatch) -> None:
    from quantbench.accelerator.nvidia import DEVICE_ENV

    monkeypatch.setenv(DEVICE_ENV, "cuda")
    probed = not_probed("x-llamacpp", "x", LlamaCppEngine(), "parallel=4",
                        LlamaCppSettings(parallel=4), [], skipped="resumed")  # fmt: skip
    assert probed.gpu == "NVIDIA H100 80GB HBM3"
    monkeypatch.setenv(DEVICE_ENV, "cpu")  # runtime.device: cpu on the GPU machine
    probed = not_probed("x-llamacpp", "x", LlamaCppEngine(), "parallel=4",
                        LlamaCppSettings(parallel=4), [], skipped="resumed")  # fmt: skip
    assert probed.gpu is None


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_older_pair_probe_reads_as_probed(tmp_path, version: int) -> None:
    """Version 2 added `skipped` (every version-1 pair was probed); version 3 moved the probe
    onto the bench's server (the fields are the same); version 4 added `gpu` (every earlier
    probe was of a CPU): older files read unchanged."""
    good = examples.pair_calibration()
    data = json.loads(good.model_dump_json())
    data["schema_version"] = version
    del data["gpu"]
    if version == 1:
        del data["skipped"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert schema_io.read(path, type(good), pair=good.pair) == good
