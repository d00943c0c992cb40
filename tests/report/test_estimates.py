"""Estimate beside measurement in the report: each row beside its own pair's prediction, and the
planning band (±25 %) counted, with what missed named."""

from __future__ import annotations

import pytest
from tests.schemas import examples

from quantbench.engines.transformers import TransformersSettings
from quantbench.estimate.arch import read_architecture
from quantbench.estimate.hardware import HardwareSpec
from quantbench.estimate.pairs import BenchPair, WorkloadShape, predict_pairs
from quantbench.estimate.spec import EstimatedVariant, EstimateSettings
from quantbench.report.estimates import EstimateRow, band_summary, edge_rows, estimate_rows
from quantbench.report.inputs import load_inputs
from quantbench.report.profiles import judge_profiles
from quantbench.report.spec import ReportSettings

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


def _row(concurrency, tpot=None, tps=None, pair="p", setting="default"):
    return EstimateRow(
        pair=pair, variant="v", engine="e", server_point=setting, load_point=f"c{concurrency}",
        concurrency=concurrency, hardware="this", estimate_engine="e",
        estimated_ttft_ms=100.0, measured_ttft_ms=100.0,
        estimated_tpot_ms=None if tpot is None else 50.0,
        measured_tpot_ms=None if tpot is None else 50.0 * tpot,
        estimated_output_tps=None if tps is None else 20.0,
        measured_output_tps=None if tps is None else 20.0 * tps,
        estimate_lengths=(40, 32), measured_lengths=(40.0, 32.0),
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
    assert lines[0].startswith("4 of 6 planning figures within ±25%")
    (miss,) = lines[1:]
    assert miss.startswith("q default:")
    assert "TPOT at one stream off by +40% (the decode step" in miss
    assert "output tok/s above one stream off by -50% (serving many" in miss
    assert "output tok/s at one stream" not in miss  # that one was within the band
    assert band_summary([_row(1)]) == []
