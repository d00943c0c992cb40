"""Bench runs out in other tools' formats: llm-d's benchmark report 0.2 (checked against
llm-d-benchmark's own JSON schema) and `vllm bench serve`'s JSON (read back by the importer to
the same figures)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from quantbench.cli import main
from quantbench.cli.exchange import read_file
from quantbench.load.session import Target, run_session
from quantbench.mock_server import Behaviour, MockServerProcess, Script
from quantbench.workloads.spec import WorkloadSpec

SCHEMA = json.loads(
    Path(__file__).with_name("data").joinpath("llm-d_br_v0_2_json_schema.json").read_text()
)
UNITS = {
    "time_to_first_token": ("ms", "s"),
    "time_per_output_token": ("ms/token", "s/token"),
    "inter_token_latency": ("ms/token", "s/token"),
    "request_latency": ("ms", "s"),
}
RUN = ("bf16-mock", "default", "chat", "c2", "r1")


@pytest.fixture(scope="module")
def bench_tree(tmp_path_factory) -> Path:
    """A bench stage's output folder with one real run: <pair>/<server>/<workload>/<load>/r1/."""
    root = tmp_path_factory.mktemp("exchange")
    script = Script(behaviours=[Behaviour(ttft_ms=20, itl_ms=5, output_tokens=8)])
    with MockServerProcess(script, root / "server") as server:
        spec = WorkloadSpec.model_validate({
            "prompts": {"source": "random", "input_len": 16, "output_len": 8},
            "load": [{"kind": "concurrency", "concurrency": 2}],
            "num_requests": 12, "warmup_requests": 2, "progress_interval_s": 5.0,
        })  # fmt: skip
        run_session(spec, Target(url=server.url, engine="mock"), root.joinpath("bench", *RUN))
    return root / "bench"


def _session(bench: Path):  # type: ignore[no-untyped-def]
    from quantbench.schemas import io as schema_io
    from quantbench.schemas.session import SessionSummary

    return schema_io.read(bench.joinpath(*RUN, "summary.json"), SessionSummary)


def test_llmd_report_is_valid_under_llmds_schema_and_holds_our_figures(bench_tree, tmp_path):
    out = tmp_path / "llm-d"
    assert main(["export", "--to", "llm-d", "--bench", str(bench_tree), "--out", str(out)]) == 0
    (path,) = out.glob("*.json")
    assert path.name == "__".join(RUN) + ".json"
    report = json.loads(path.read_text())
    jsonschema.validate(report, SCHEMA)  # llm-d-benchmark's own schema, unchanged
    point = _session(bench_tree).points[0]
    aggregate = report["results"]["request_performance"]["aggregate"]
    latency = aggregate["latency"]
    assert latency["time_to_first_token"]["mean"] == point.ttft.mean_ms
    assert latency["time_to_first_token"]["p99"] == point.ttft.percentiles_ms["p99"]
    # TPOT (first token excluded) where llm-d's schema defines it so; ITL per chunk where its
    # converter files vLLM's; nothing under NTPOT, which we do not measure
    assert latency["time_per_output_token"] == {
        **latency["time_per_output_token"],
        "units": "ms/token",
        "mean": point.tpot.mean_ms,
    }
    assert latency["inter_token_latency"]["p50"] == point.itl.percentiles_ms["p50"]
    assert "normalized_time_per_output_token" not in latency
    # the units llm-d's models accept per field (schema_v0_2.py's validators; its JSON schema
    # only lists every unit)
    for name, allowed in UNITS.items():
        assert latency[name]["units"] in allowed, name
    assert latency["request_latency"]["max"] == point.e2e.max_ms
    assert aggregate["requests"]["total"] == point.requests == 12
    assert aggregate["throughput"]["output_token_rate"] == {
        "units": "tokens/s",
        "mean": point.output_throughput,
    }
    load = report["scenario"]["load"]["standardized"]
    assert load["concurrency"] == 2 and load["source"] == "random"
    assert load["output_seq_len"] == {"distribution": "fixed", "value": 8}


def test_a_report_llmds_schema_refuses_is_caught_by_the_check(bench_tree, tmp_path) -> None:
    # the check above can fail: our own names, a missing mean, a unit llm-d does not know
    out = tmp_path / "llm-d"
    main(["export", "--to", "llm-d", "--bench", str(bench_tree), "--out", str(out)])
    good = json.loads(next(out.glob("*.json")).read_text())

    def latency(report: dict) -> dict:
        return report["results"]["request_performance"]["aggregate"]["latency"]

    for change, words in (
        (lambda r: latency(r).update(tpot=latency(r)["time_per_output_token"]), "tpot"),
        (lambda r: latency(r)["request_latency"].pop("mean"), "mean"),
        (lambda r: latency(r)["time_to_first_token"].update(units="msec"), "msec"),
    ):
        report = json.loads(json.dumps(good))
        change(report)
        with pytest.raises(jsonschema.ValidationError, match=words):
            jsonschema.validate(report, SCHEMA)


def test_vllm_export_reads_back_as_the_same_figures(bench_tree, tmp_path) -> None:
    out = tmp_path / "vllm"
    assert main(["export", "--to", "vllm", "--bench", str(bench_tree), "--out", str(out)]) == 0
    (path,) = out.glob("*.json")
    (run,) = read_file(path).runs
    point = _session(bench_tree).points[0]
    assert run.tool == "vllm-bench-serve" and run.completed == point.completed
    assert run.output_throughput == point.output_throughput
    for name in ("ttft", "tpot", "itl", "e2e"):
        ours, back = getattr(point, name), getattr(run, name)
        assert back.mean == ours.mean_ms
        assert (back.p50, back.p90, back.p99) == tuple(
            ours.percentiles_ms[f"p{p}"] for p in (50, 90, 99)
        )


def test_export_without_runs_says_what_to_run(tmp_path, capsys) -> None:
    assert main(["export", "--to", "llm-d", "--bench", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no bench runs" in err and "make repro" in err


def test_a_runs_lengths_are_its_own_points(bench_tree) -> None:
    # a session of several points (`quantbench load`) hands every point's records: each
    # report counts its own point's requests only
    from quantbench.exchange import llmd
    from quantbench.load.records import read_records

    session = _session(bench_tree)
    records = read_records(bench_tree.joinpath(*RUN, "records.jsonl"))
    other = [r.model_copy(update={"point": "r9", "prompt_tokens": 999}) for r in records]
    report = llmd.report(session, session.points[0], [*records, *other], label="x")
    lengths = report["results"]["request_performance"]["aggregate"]["requests"]["input_length"]
    assert lengths["max"] < 999
