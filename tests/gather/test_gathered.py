"""The machines compared: what a verdict may say from the intervals, which machine is which."""

from __future__ import annotations

from tests.schemas.examples import env_info

from quantbench.gather.gathered import gather
from quantbench.gather.machines import (
    Fingerprint,
    Interval,
    MachineRun,
    WorkloadBest,
    cost_per_million,
    fingerprint,
)
from quantbench.schemas.env import CpuInfo, GpuInfo
from quantbench.schemas.estimate import EstimateSummaryRow


def _machine(cpu: str, gpus: list[str] | None = None) -> Fingerprint:
    """The fingerprint of a reports/env.json that differs from the schema's example only in
    its CPU and GPUs."""
    env = env_info()
    env = env.model_copy(update={
        "cpu": CpuInfo(model=cpu, logical_cores=2, flags=["avx2"]), "memory_gib": 24,
        "gpus": [
            GpuInfo(index=i, name=g, memory_mib=24576, compute_capability="8.9")
            for i, g in enumerate(gpus or [])
        ],
    })  # fmt: skip
    return fingerprint(env)


def _estimate(hardware: str) -> EstimateSummaryRow:
    """One summary row of reports/estimate/estimates.json: bf16 on vLLM at 1,000 tok/s."""
    return EstimateSummaryRow(
        variant="bf16", hardware=hardware, engine="vllm", bits_per_weight=16.0,
        weights_source="safetensors headers", prefill_bound="compute", decode_bound="memory",
        ttft_ms_c1=10.0, itl_ms_c1=5.0, decode_tps_c1=200.0, best_concurrency=32,
        best_output_tps=1000.0, limit_kv_memory=64, limit_prefill_compute=64, limit_decode=32,
        limit_overall=32,
    )  # fmt: skip


def _run(name: str, cpu: str, price: float, tps: Interval, **extra: object) -> MachineRun:
    cost = Interval(value=cost_per_million(price, tps.value) or 0,
                    low=cost_per_million(price, tps.high or 0),
                    high=cost_per_million(price, tps.low or 0))  # fmt: skip
    best = WorkloadBest(workload="chat", experiment=name, status="ranked", pair="p", tps=tps,
                        cost_per_million=cost)  # fmt: skip
    return MachineRun(experiment=name, commit="0" * 40, fingerprint=_machine(cpu),
                      price_per_hour=price, currency="USD", best=[best], pairs=[],
                      **extra)  # type: ignore[arg-type]  # fmt: skip


def test_overlapping_cost_intervals_are_not_separable() -> None:
    """Cheaper by its point estimate, but the intervals overlap: no machine is named cheapest."""
    found = gather([
        _run("a", "cpu a", 0.10, Interval(value=100, low=80, high=120)),
        _run("b", "cpu b", 0.10, Interval(value=110, low=90, high=130)),
    ])  # fmt: skip
    [chat] = found.workloads
    assert chat.cheapest is None and chat.verdict.startswith("not separable")
    assert [r.best.experiment for r in chat.rows] == ["b", "a"]  # still in order of cost


def test_experiments_of_one_machine_are_one_machine_and_its_best_wins() -> None:
    found = gather([
        _run("slow", "cpu a", 0.10, Interval(value=100, low=90, high=110)),
        _run("fast", "cpu a", 0.20, Interval(value=150, low=140, high=160)),
    ])  # fmt: skip
    [machine] = found.machines
    assert machine.experiments == ["slow", "fast"]
    assert machine.price_per_hour is None  # two prices: each row priced at its own
    assert [b.experiment for b in machine.best] == ["fast"]


def test_a_fingerprint_tells_machines_apart_by_what_serves() -> None:
    assert _machine("cpu a").id == _machine("cpu a").id
    assert _machine("cpu a").id != _machine("cpu b").id
    assert _machine("cpu a", ["NVIDIA L4"]).id != _machine("cpu a").id
    assert _machine("cpu a", ["NVIDIA L4"]).label == "NVIDIA L4 (24 GiB)"


def test_the_roofline_rows_leave_out_hardware_a_machine_measured() -> None:
    rows = [_estimate(h) for h in ("L4", "H100", "this")]
    gpu = _run("gpu", "cpu a", 0.8, Interval(value=100, low=90, high=110), estimates=rows)
    gpu.fingerprint = _machine("cpu a", ["NVIDIA L4"])
    found = gather([gpu], prices={"H100": 2.5})
    assert [(e.hardware, e.cost_per_million) for e in found.estimated] == [
        ("H100", cost_per_million(2.5, 1000.0))
    ]


class _Files:
    """An experiment whose only file is its best_config.json (ExperimentFiles' one method)."""

    def __init__(self, best_config: str) -> None:
        from quantbench.gather.experiments import Experiment

        self.experiment = Experiment(name="exp-a", sha="0" * 40, baseline="0" * 40)
        self.best_config = best_config

    def text(self, path: str) -> str | None:
        return self.best_config if path.endswith("best_config.json") else None


def test_each_best_config_entry_is_read_through_its_schema() -> None:
    """The recommendation's throughput and interval come from the typed entry; an entry of the
    format before the schema (format_version 3, its tie's figure under the metric's name) is
    migrated; an entry that is not one is a problem, named, and the others are kept."""
    import json

    from tests.schemas.examples import GOLDEN

    from quantbench.gather.machines import read_run

    data = json.loads((GOLDEN / "best_config.json").read_text())
    old = dict(data["chat"])
    del old["schema_version"]
    old["format_version"] = 3
    old["ties"] = [
        {**{k: v for k, v in t.items() if k not in ("metric", "figure")}, t["metric"]: t["figure"]}
        for t in old["ties"]
    ]
    broken = {**data["chat"], "pair": None}
    text = json.dumps({"chat": data["chat"], "chat:old": old, "chat:strict": data["chat:strict"],
                       "multi-turn": broken})  # fmt: skip
    run = read_run(_Files(text))  # type: ignore[arg-type]
    best = {b.workload: b for b in run.best}
    good = data["chat"]["expected"]["good_output_throughput"]
    assert best["chat"].tps == Interval(value=good["value"], low=good["low"], high=good["high"])
    assert best["chat:old"] == best["chat"].model_copy(update={"workload": "chat:old"})
    assert best["chat:strict"].status == "none" and best["chat:strict"].reason
    assert "multi-turn" not in best
    assert any("best_config.json [multi-turn]: not a valid Recommended" in p for p in run.problems)
