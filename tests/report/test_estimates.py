"""Estimate beside measurement in the report: each row beside its own pair's prediction, and the
planning band (±25 %) counted, in-sample (what the pair's probe ran) and out-of-sample apart, with
what missed named."""

from __future__ import annotations

import dataclasses

import pytest
from tests.schemas import examples

from quantbench.decision.profiles import judge_profiles
from quantbench.engines.transformers import TransformersSettings
from quantbench.estimate.arch import read_architecture
from quantbench.estimate.compare import ProbeSpan
from quantbench.estimate.pairs import BenchPair, WorkloadShape, predict_pairs
from quantbench.estimate.spec import EstimateSettings
from quantbench.outputs import load_inputs
from quantbench.report.estimates import EstimateRow, band_summary, edge_rows, estimate_rows
from quantbench.report.spec import ReportSettings
from quantbench.schemas import io as schema_io
from quantbench.schemas.estimate_inputs import EstimatedVariant
from quantbench.schemas.hardware import HardwareSpec
from quantbench.schemas.machine import PairCalibration

from .conftest import FIXTURE_SLO, FIXTURE_WORKLOADS, WORKLOADS

CPU = HardwareSpec.model_validate(examples.CPU_2CORE)


@pytest.fixture(scope="module")
def inputs(fixture_tree):
    found = load_inputs(fixture_tree)
    arch = read_architecture(fixture_tree / "models" / "merged")
    pair = BenchPair(
        "bf16", "transformers", TransformersSettings(sweep={"continuous_batching": [False, True]})
    )
    shapes = {name: WorkloadShape(w.prompt, w.output, (1, 4)) for name, w in WORKLOADS.items()}
    found.predictions = predict_pairs(
        arch, fixture_tree / "models" / "merged",
        {"bf16": EstimatedVariant(name="bf16", format="bf16")},
        {"bf16-transformers": pair}, shapes, "this", CPU,
        EstimateSettings(efficiency={"step_overhead_ms": 8.0}),
    )  # fmt: skip
    return found


def test_a_row_is_put_beside_its_own_pair_setting_and_workload(inputs):
    (chat,) = [
        p
        for p in judge_profiles(inputs, FIXTURE_SLO, ReportSettings(), workloads=FIXTURE_WORKLOADS)
        if p.key == "chat"
    ]
    rows, _ = estimate_rows(inputs, chat)
    mine = [r for r in rows if r.pair == "bf16-transformers"]
    assert mine and all(r.source == "pair prediction" for r in mine)
    serial = {r.concurrency: r for r in mine if r.server_point == "continuous_batching=off"}
    assert serial[4].max_batch == 1  # one at a time: the queue, not a batch of four
    assert serial[4].estimated_output_tps == pytest.approx(serial[1].estimated_output_tps)
    assert serial[4].estimate_lengths == (WORKLOADS["chat"].prompt, WORKLOADS["chat"].output)
    # pairs the estimate stage did not predict keep the variant's estimate
    others = [r for r in rows if r.pair != "bf16-transformers"]
    assert others and all(r.source == "report" for r in others)


def test_the_predicted_slo_edge_is_put_beside_the_measured_one(inputs):
    from quantbench.estimate.pipeline import slo_targets

    (chat,) = [
        p
        for p in judge_profiles(inputs, FIXTURE_SLO, ReportSettings(), workloads=FIXTURE_WORKLOADS)
        if p.key == "chat"
    ]
    edges = {e.server_point: e for e in edge_rows(inputs, chat)}
    assert set(edges) == {"continuous_batching=off", "continuous_batching=on"}  # predicted pairs
    limits = slo_targets(chat.slo)  # ttft:p90<=500ms; tpot:p50<=60ms
    for label, edge in edges.items():
        prediction = next(
            p for p in inputs.predictions if (p.server_point, p.workload) == (label, "chat")
        )
        meeting = [
            p.concurrency
            for p in prediction.points
            if p.ttft_ms <= limits.ttft_ms and p.itl_ms <= limits.itl_ms and p.fits_memory
        ]
        assert edge.predicted == (max(meeting) if meeting else None)
        rows = [
            j
            for j in chat.rows
            if j.pair == "bf16-transformers" and j.row.server_point == label and j.row.measured
        ]
        passing = [int(j.row.load_value) for j in rows if j.rankable]
        assert edge.measured == (max(passing) if passing else None)
        assert edge.measured_loads == [1, 4]
        assert "predicted" in edge.text and "on the means" in edge.text


PROBE = ProbeSpan(server_point="default", max_batch=4, prompt_tokens=(20, 300), max_context=332)
"""A probe of setting 'default' at 1-4 streams over prompts the rows' 40 tokens lie within."""


def _row(concurrency, tpot=None, tps=None, pair="p", setting="default", probe=None):
    return EstimateRow(
        pair=pair, variant="v", engine="e", server_point=setting, load_point=f"c{concurrency}",
        concurrency=concurrency, hardware="this", estimate_engine="e",
        estimated_ttft_ms=100.0, measured_ttft_ms=100.0,
        estimated_tpot_ms=None if tpot is None else 50.0,
        measured_tpot_ms=None if tpot is None else 50.0 * tpot,
        estimated_output_tps=None if tps is None else 20.0,
        measured_output_tps=None if tps is None else 20.0 * tps,
        estimate_lengths=(40, 32), measured_lengths=(40.0, 32.0), probe=probe,
    )  # fmt: skip


def test_the_band_counts_tpot_at_one_stream_and_throughput_at_every_load():
    rows = [
        _row(1, tpot=1.10, tps=0.95),  # both inside
        _row(4, tpot=3.0, tps=1.20),  # TPOT above one stream is not a planning figure
        _row(1, tpot=1.40, tps=1.0, pair="q"),  # the decode step is off by +40 %
        _row(4, tps=0.5, pair="q"),  # serving many is off by -50 %
    ]
    assert rows[0].within_band and rows[1].within_band
    assert rows[2].within_band is False
    lines = band_summary(rows)
    # no probe behind any row: every figure tests the model, none is in-sample
    assert lines[0].startswith("out-of-sample 4 of 6 planning figures within ±25%")
    assert "no in-sample figure" in lines[0]
    miss = lines[1]
    assert miss.startswith("q default:")
    assert "TPOT at one stream off by +40%, out-of-sample (the decode step" in miss
    assert "output tok/s above one stream off by -50%, out-of-sample (serving many" in miss
    assert "output tok/s at one stream" not in miss  # that one was within the band
    assert len(lines) == 2 + 4  # the headline, one pair missing, then each row
    assert band_summary([_row(1)]) == []


def test_a_load_beyond_the_probes_largest_batch_is_out_of_sample():
    rows = [
        _row(1, tpot=1.05, tps=0.90, probe=PROBE),
        _row(4, tps=1.10, probe=PROBE),
        _row(8, tps=0.60, probe=PROBE),  # twice the probe's batch: the model extrapolates
    ]
    assert [r.sample.in_sample for r in rows] == [True, True, False]
    assert "8 streams, beyond the probe's 4" in rows[2].sample.reason
    assert "c4 within its 1-4 streams" in rows[1].sample.reason
    lines = band_summary(rows)
    assert lines[0].startswith(
        "in-sample 3 of 3 planning figures within ±25% (median |error| 10%); "
        "out-of-sample 0 of 1 (median |error| 40%)"
    )
    assert "p default: output tok/s above one stream off by -40%, out-of-sample" in lines[1]
    # each row says which it is and why, those that test the model first
    assert (
        lines[2]
        == "p default c8: output tok/s -40%, out-of-sample (8 streams, beyond the probe's 4)"
    )
    assert lines[3].startswith("p default c1: TPOT +5%, output tok/s -10%, in-sample (the probe's")


def test_a_setting_or_lengths_the_probe_did_not_run_are_out_of_sample():
    other = _row(1, tpot=1.0, tps=1.0, setting="slots=1", probe=PROBE)
    assert "setting slots=1, the probe ran default" in other.sample.reason
    longer = dataclasses.replace(_row(1, tps=1.0, probe=PROBE), measured_lengths=(40.0, 400.0))
    assert not longer.sample.in_sample
    assert "context 440 tokens, beyond the probe's 332" in longer.sample.reason
    unprobed = _row(1, tps=1.0)
    unprobed.source = "pair prediction"
    assert not unprobed.sample.in_sample and "not probed" in unprobed.sample.reason


def test_only_in_sample_figures_say_there_is_no_out_of_sample_check():
    lines = band_summary([_row(1, tpot=1.02, tps=0.97, probe=PROBE), _row(4, tps=1.3, probe=PROBE)])
    assert lines[0].startswith("in-sample 2 of 3 planning figures within ±25%")
    assert (
        "no out-of-sample figure: every measured point is within the probe's own batches and "
        "lengths" in lines[0]
    )
    assert "out-of-sample 0" not in lines[0]


def test_rows_are_judged_against_their_pairs_probe_file(inputs, tmp_path):
    from quantbench.estimate.step_fit import fit_steps
    from quantbench.schemas.step_fit import ProbeRequest

    (chat,) = [
        p
        for p in judge_profiles(inputs, FIXTURE_SLO, ReportSettings(), workloads=FIXTURE_WORKLOADS)
        if p.key == "chat"
    ]
    requests = [
        ProbeRequest(concurrency=k, prompt_tokens=p, output_tokens=32, ttft_ms=50.0 + p, tpot_ms=ms)
        for k, p, ms in ((1, 10, 20.0), (1, 400, 24.0), (2, 10, 30.0), (2, 10, 30.0))
    ]
    probed = examples.pair_calibration().model_copy(
        update={
            "pair": "bf16-transformers", "variant": "bf16", "engine": "transformers",
            "server_point": "continuous_batching=on", "requests": requests,
            "fit": fit_steps(requests),
        }
    )  # fmt: skip
    path = tmp_path / PairCalibration.OUTPUT.format(pair="bf16-transformers")
    schema_io.write(path, probed)
    rows, _ = estimate_rows(dataclasses.replace(inputs, root=tmp_path), chat)
    mine = {
        (r.server_point, r.concurrency): r.sample for r in rows if r.pair == "bf16-transformers"
    }
    assert mine[("continuous_batching=on", 1)].in_sample  # its setting, within its batch of 2
    assert "4 streams, beyond the probe's 2" in mine[("continuous_batching=on", 4)].reason
    off = mine[("continuous_batching=off", 1)]
    assert not off.in_sample and "the probe ran continuous_batching=on" in off.reason
    # without the file the prediction is the roofline's: nothing in it is in-sample
    rows, _ = estimate_rows(inputs, chat)
    assert not any(r.sample.in_sample for r in rows)
    # an unreadable calibration is a note, not a crash
    path.write_text("{")
    rows, notes = estimate_rows(dataclasses.replace(inputs, root=tmp_path), chat)
    assert any("bf16-transformers/probe.json" in n for n in notes)
    assert not any(r.sample.in_sample for r in rows)
