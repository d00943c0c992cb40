"""Other tools' result files, written by the tools themselves (golden/README.md), read as
quantbench's figures: each field mapped by what it measures, never by its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantbench.cli import main
from quantbench.cli.exchange import read_file
from quantbench.errors import UserError
from quantbench.exchange.figures import ImportedRuns
from quantbench.report import foreign

GOLDEN = Path(__file__).with_name("golden")


def raw(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text())


def test_vllm_bench_serve_maps_key_for_key() -> None:
    data = raw("vllm-bench-serve.json")
    (run,) = read_file(GOLDEN / "vllm-bench-serve.json").runs
    assert run.tool == "vllm-bench-serve" and run.load == "concurrency 2"
    assert (run.completed, run.failed, run.requests) == (16, 0, 16)
    assert run.output_throughput == data["output_throughput"]
    assert run.goodput == data["request_goodput"]
    for ours, theirs in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2el")):
        stats = getattr(run, ours)
        assert stats.mean == data[f"mean_{theirs}_ms"]
        assert (stats.p50, stats.p90, stats.p99) == tuple(
            data[f"p{p}_{theirs}_ms"] for p in (50, 90, 99)
        )
    assert run.itl.weighting == "per chunk" and run.tpot.weighting == "per request"
    assert any("role-only" in n for n in run.notes)  # its TTFT's one difference from ours


def test_vllm_bench_serve_with_its_defaults_says_what_is_missing() -> None:
    data = raw("vllm-bench-serve.json")
    # --percentile-metrics ttft,tpot,itl and --metric-percentiles 99 (its defaults); the older
    # script's goodput key
    data = {k: v for k, v in data.items() if "e2el" not in k and not k.startswith(("p50", "p90"))}
    data["request_goodput:"] = data.pop("request_goodput")
    data.pop("failed")
    (run,) = read_file(_write(data, "old.json")).runs
    assert run.e2e is None and run.tpot.p90 is None and run.tpot.p50 == data["median_tpot_ms"]
    assert run.goodput == data["request_goodput:"] and run.failed == 0
    assert any("no E2E latency" in n for n in run.notes)


def test_aiperf_inter_token_latency_is_our_tpot_and_its_chunk_gaps_our_itl() -> None:
    data = raw("aiperf-profile_export_aiperf.json")
    (run,) = read_file(GOLDEN / "aiperf-profile_export_aiperf.json").runs
    assert run.tool == "aiperf" and run.tool_version == "0.13.0"
    assert run.model == "mock-model" and run.load == "concurrency 2"
    assert (run.completed, run.failed) == (16, 0)
    # AIPerf's "inter_token_latency" is per request (latency - TTFT) / (tokens - 1): our TPOT;
    # its "inter_chunk_latency" (gaps between chunks) is our ITL
    assert run.tpot.field == "inter_token_latency"
    assert run.tpot.mean == data["inter_token_latency"]["avg"]
    assert run.itl.field == "inter_chunk_latency"
    assert run.itl.p50 == data["inter_chunk_latency"]["p50"]
    assert run.ttft.p99 == data["time_to_first_token"]["p99"]
    assert run.e2e.mean == data["request_latency"]["avg"]
    assert run.goodput == data["goodput"]["avg"]
    assert run.duration_s == data["benchmark_duration"]["avg"]  # "sec": a scalar, kept in s
    # it counted 26 client tokens an answer where the server said 12: the figures say so
    (note,) = [n for n in run.notes if "client tokenizer" in n]
    assert "26" in note and "12" in note and "2.27x" in note


def test_guidellm_time_per_output_token_is_not_our_tpot() -> None:
    data = raw("guidellm-benchmarks.json")
    (run,) = read_file(GOLDEN / "guidellm-benchmarks.json").runs
    metrics = data["benchmarks"][0]["metrics"]
    assert run.tool == "guidellm" and run.tool_version == "0.8.1"
    assert (run.completed, run.failed, run.requests) == (16, 0, 16)
    # its inter_token_latency_ms, (last - first token) / (tokens - 1), is our TPOT; its
    # time_per_output_token_ms includes the first token's wait and is left out
    itl = metrics["inter_token_latency_ms"]["successful"]
    assert run.tpot.mean == itl["mean"] and run.tpot.p90 == itl["percentiles"]["p90"]
    assert run.tpot.mean != metrics["time_per_output_token_ms"]["successful"]["mean"]
    assert run.itl is None
    assert any("includes the first token" in n for n in run.notes)
    # request latency is in seconds there
    latency = metrics["request_latency"]["successful"]
    assert run.e2e.p50 == pytest.approx(latency["percentiles"]["p50"] * 1000)
    assert run.output_throughput == metrics["output_tokens_per_second"]["successful"]["mean"]


def test_mapped_per_token_figures_agree_with_the_scripted_servers_10_ms() -> None:
    # The three tools measured one scripted server: 40 ms to the first token, then one every
    # 10 ms. Mapped by meaning, their TPOTs agree with that 10 ms (plus a client's overhead),
    # once each tool's stated difference is applied; mapped by name they would not (GuideLLM's
    # "TPOT" 14.6 ms, AIPerf's "inter_token_latency" 5.1).
    runs = {r.tool: r for f in GOLDEN.glob("*.json") for r in read_file(f).runs}
    assert 10 <= runs["guidellm"].tpot.p50 <= 13
    aiperf = runs["aiperf"]
    client_osl = raw("aiperf-profile_export_aiperf.json")["output_sequence_length"]["avg"]
    assert 10 <= aiperf.tpot.p50 * (client_osl - 1) / (12 - 1) <= 13
    vllm = runs["vllm-bench-serve"]  # its TTFT ends at the role chunk: the 40 ms move to TPOT
    assert 10 <= vllm.tpot.p50 - (40 - vllm.ttft.p50) / (12 - 1) <= 13
    for run in runs.values():
        assert 9 <= run.itl.p50 <= 13 if run.itl else True


def _write(data: dict, name: str) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / name
    path.write_text(json.dumps(data))
    return path


def test_a_file_of_no_known_tool_is_refused_saying_which_it_could_be(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not recognised as a result of vllm-bench-serve"):
        read_file(_write({"hello": 1}, "x.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="cannot be read as JSON"):
        read_file(bad)
    # named as one tool's, but not shaped like it
    with pytest.raises(UserError, match="not a guidellm result"):
        read_file(_write({"benchmarks": [{"metrics": {"request_totals": 3}}]}, "g.json"))


def test_import_command_writes_one_file_per_input(tmp_path: Path, capsys) -> None:
    files = sorted(str(p) for p in GOLDEN.glob("*.json"))
    assert main(["import", *files, "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    for tool in ("aiperf 0.13.0", "guidellm 0.8.1", "vllm-bench-serve"):
        assert tool in table
    for path in files:
        written = ImportedRuns.model_validate_json(
            (tmp_path / f"{Path(path).stem}.json").read_text()
        )
        assert written.runs and written.definitions["tpot"].startswith("time per output token")
        # the terminal's rows are the report's rows, cell for cell
        for run in written.runs:
            assert "| " + " | ".join(foreign.row(run)["cells"]) + " |" in table.splitlines()
