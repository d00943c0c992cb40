"""`quantbench load` flags, the vllm-format export, and token counting with a tokenizer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from quantbench.cli.load import add_load_arguments, main, workload_from_args
from quantbench.load.export import to_vllm_result
from quantbench.load.metrics import summarize
from quantbench.load.records import RequestRecord, read_records
from quantbench.load.tokens import fill_token_counts, load_counter
from quantbench.mock_server import Behaviour, MockServerProcess, Script
from quantbench.workloads.prompts import PromptItem


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_load_arguments(parser)
    return parser.parse_args(["--url", "http://127.0.0.1:1", *argv])


def test_flags_build_a_sweep() -> None:
    spec, slo = workload_from_args(_args(
        "--random-input-len", "32", "--random-output-len", "8", "--concurrency", "1,4",
        "--rate", "2.5", "--burstiness", "0.5", "--max-concurrency", "8", "--num-requests", "10",
        "--request-field", "temperature=0", "--request-field", "stop=END", "--slo", "rps>=1",
    ))  # fmt: skip
    assert [spec.point_label(i) for i in range(3)] == ["c1", "c4", "r2.5-b0.5-max8"]
    assert spec.request_fields == {"temperature": 0, "stop": "END"}
    assert slo == "rps>=1"


def test_each_workload_flag_sets_its_field_with_the_models_help_and_type() -> None:
    """The flags that set one WorkloadSpec field take their help and type from the settings model
    (they cannot drift from it), and each sets that field."""
    from quantbench.cli.load import SPEC_FLAGS
    from quantbench.workloads.spec import WorkloadSpec

    parser = argparse.ArgumentParser()
    add_load_arguments(parser)
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for flag, field in SPEC_FLAGS.items():
        description = WorkloadSpec.model_fields[field].description
        assert description and actions[flag].help.startswith(description.replace("%", "%%"))
    assert actions["--api"].choices == ["chat", "completions"]
    assert actions["--warmup-s"].type is float and actions["--num-requests"].type is int
    spec, _ = workload_from_args(_args(
        "--random-input-len", "8", "--random-output-len", "4", "--concurrency", "1",
        "--name", "mine", "--api", "completions", "--num-requests", "7", "--duration", "3",
        "--warmup-requests", "2", "--warmup-s", "0.5", "--seed", "9", "--no-fixed-output-length",
        "--timeout", "11", "--request-timeout", "12", "--point-timeout", "13", "--workers", "0",
        "--percentiles", "50,99", "--keep-text", "--no-unique-prompts",
    ))  # fmt: skip
    assert (spec.name, spec.api, spec.num_requests, spec.duration_s) == (
        "mine",
        "completions",
        7,
        3,
    )
    assert (spec.warmup_requests, spec.warmup_s, spec.seed) == (2, 0.5, 9)
    assert spec.fixed_output_length is False and spec.keep_text is True and spec.workers == 0
    assert (spec.timeout_s, spec.request_timeout_s, spec.point_timeout_s) == (11, 12, 13)
    assert spec.percentiles == [50.0, 99.0]
    # the marker that keeps prompts unique is on unless the flag says otherwise
    assert spec.unique_prompts is False
    plain, _ = workload_from_args(_args("--random-input-len", "8", "--random-output-len", "4",
                                        "--concurrency", "1", "--num-requests", "2"))  # fmt: skip
    assert plain.unique_prompts is True


def test_random_output_length_is_binding_by_default() -> None:
    # `--random-output-len 32` let answers end early (1,725 of 2,048 tokens) and halved TTFT
    # against vllm bench serve --ignore-eos on the same server.
    argv = ("--random-input-len", "32", "--random-output-len", "32", "--concurrency", "1",
            "--num-requests", "4")  # fmt: skip
    assert workload_from_args(_args(*argv))[0].fixed_output_length is True
    loose = workload_from_args(_args(*argv, "--no-fixed-output-length"))[0]
    assert loose.fixed_output_length is False
    parser = argparse.ArgumentParser()
    add_load_arguments(parser)
    assert "binding" in parser.format_help()


def test_a_named_workload_and_a_precision_target() -> None:
    spec, _ = workload_from_args(_args(
        "--workload", "multi-turn", "--length-scale", "0.1", "--precision", "ttft:p50,tpot:p50",
        "--precision-width", "0.1",
    ))  # fmt: skip
    assert spec.use == "multi-turn" and spec.length_scale == 0.1
    assert spec.precision is not None and spec.precision.rel_half_width == 0.1
    assert spec.points  # the named workload's own load points


def test_flags_override_the_params_file(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(
        "workloads:\n other: {use: chat, num_requests: 8}\n"
        " mine:\n  prompts: {source: random, input_len: 4, output_len: 2}\n"
        "  load: [{kind: concurrency, concurrency: 2}]\n  num_requests: 5\n  seed: 3\n"
        "  fixed_output_length: true\n"
        "slo: 'ttft:p95<=1s'\n",
        encoding="utf-8",
    )
    spec, slo = workload_from_args(
        _args("--params", str(params), "--workload", "mine", "--num-requests", "9")
    )
    assert (spec.num_requests, spec.seed, spec.load[0].concurrency) == (9, 3, 2)
    assert spec.name == "mine" and slo == "ttft:p95<=1s"
    with pytest.raises(ValueError, match="has no workload 'nope'; its workloads: other, mine"):
        workload_from_args(_args("--params", str(params), "--workload", "nope"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "1", "--num-requests", "2"], "no prompts"),
        (["--random-input-len", "4", "--random-output-len", "2", "--num-requests", "2"],
         "no load shape"),
        (["--random-input-len", "4", "--concurrency", "1", "--num-requests", "2"],
         "both --random-input-len and --random-output-len"),
        (["--random-input-len", "4", "--random-output-len", "2", "--concurrency", "0",
          "--num-requests", "2"], "load.0.concurrency: got 0; Input should be greater than 0"),
        (["--random-input-len", "4", "--random-output-len", "2", "--concurrency", "1",
          "--num-requests", "2", "--slo", "ttft<=5"], "ttft needs a unit"),
        (["--random-input-len", "4", "--random-output-len", "2", "--concurrency", "1",
          "--num-requests", "2", "--no-fixed-output-length"],
         "could not ask http://127.0.0.1:9/v1/models"),
        # as a user of `vllm bench serve` types it, against a plain OpenAI server (no --engine):
        # the fixed length it implies cannot be asked for; refused once, before any request
        # (it printed one traceback per request, measured nothing and exited 0)
        (["--random-input-len", "16", "--random-output-len", "64", "--concurrency", "32",
          "--num-requests", "6000"],
         "a fixed output length cannot be asked of server profile 'openai'"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_a_message(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["--url", "http://127.0.0.1:9", "--out", str(tmp_path / "out"), *argv])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before any output


@pytest.mark.server
def test_a_run_that_measures_nothing_does_not_exit_0(
    tmp_path: Path, chat_dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every request refused by the server: the records are kept, the exit status says failure."""
    with MockServerProcess(Script(behaviours=[Behaviour(status=500)]), tmp_path / "s") as srv:
        rc = main([
            "--url", srv.url + "/v1", "--engine", "mock", "--dataset", str(chat_dataset),
            "--concurrency", "1", "--num-requests", "3", "--out", str(tmp_path / "out"),
        ])  # fmt: skip
    assert rc == 1
    assert "no request completed at any point" in capsys.readouterr().err
    assert (tmp_path / "out" / "records.jsonl").stat().st_size > 0


@pytest.mark.server
def test_bench_cli_end_to_end(
    tmp_path: Path, chat_dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with MockServerProcess(
        Script(behaviours=[Behaviour(ttft_ms=5, itl_ms=2)]), tmp_path / "s"
    ) as srv:
        rc = main([
            "--url", srv.url + "/v1", "--engine", "mock", "--dataset", str(chat_dataset),
            "--concurrency", "2", "--num-requests", "6", "--fixed-output-length",
            "--slo", "ttft:p50<=2s; goodput>=0.1", "--out", str(tmp_path / "out"), "--vllm-json",
            "--keep-text",
        ])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "c2: 6 of 6 measured requests completed" in out and "PASS      ttft p50" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["model"] == "mock-model" and summary["points"][0]["completed"] == 6
    every = read_records(tmp_path / "out" / "records.jsonl")
    # warm-up first (one per stream), then 6 measured, then cool-down to keep both streams busy
    assert [r.phase for r in every][:3] == ["warmup", "warmup", "measured"]
    records = [r for r in every if r.phase == "measured"]
    assert len(records) == 6
    assert [r.output_tokens for r in records] == [
        {"q0": 4, "q1": 5, "q2": 6, "q3": 7, "q4": 8, "q5": 9}[r.prompt_id] for r in records
    ]
    assert all(r.output_text for r in records)
    vllm = json.loads((tmp_path / "out" / "vllm-c2.json").read_text())
    assert vllm["completed"] == 6 and vllm["max_concurrency"] == 2 and vllm["request_rate"] == "inf"
    assert len(vllm["ttfts"]) == 6


def _rec(i: int, chunks: list[float], status: str = "completed") -> RequestRecord:
    return RequestRecord(
        request_id=str(i), index=i, point="pt", scenario="s", prompt_id="p", phase="measured",
        worker=0, send_time=0.0, first_token_time=chunks[0],
        end_time=chunks[-1], chunk_times=chunks, chunk_tokens=[1] * len(chunks),
        prompt_tokens=3, output_tokens=len(chunks), tokens_source="usage", status=status,  # type: ignore[arg-type]
        output_text="a b",
    )  # fmt: skip


def test_vllm_export_field_names() -> None:
    records = [_rec(0, [0.1, 0.2, 0.4]), _rec(1, [0.2, 0.3])]
    point = summarize(records, point="r2", scenario="s", percentiles=[50, 99, 99.9],
                      shape={"kind": "rate", "rate": 2.0, "burstiness": 1.0, "max_concurrency": None})  # fmt: skip
    data = to_vllm_result(point, model="m", api="chat", percentiles=[50, 99, 99.9], records=records)
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p50", "p99", "p99.9"):
            assert f"{stat}_{metric}_ms" in data
    assert data["mean_ttft_ms"] == pytest.approx(150)
    assert data["median_e2el_ms"] == pytest.approx(350)
    assert data["request_rate"] == 2.0 and data["backend"] == "openai-chat"
    assert data["completed"] == 2 and data["total_output_tokens"] == 5
    assert data["itls"] == [pytest.approx([0.1, 0.2]), pytest.approx([0.1])]
    assert data["request_goodput"] is None


def test_token_counts_with_a_tokenizer_file(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    counter = load_counter(tmp_path / "tokenizer.json")
    no_usage = _rec(0, [0.1, 0.2])
    no_usage.output_tokens, no_usage.prompt_tokens, no_usage.tokens_source = None, None, "none"
    no_usage.output_text = "a b a b c"
    with_usage = _rec(1, [0.1])
    prompts = {"p": PromptItem(id="p", max_tokens=1, messages=[{"role": "user", "content": "x y"}])}
    fill_token_counts([no_usage, with_usage], counter, prompts, "chat")
    assert (no_usage.output_tokens, no_usage.tokens_source, no_usage.prompt_tokens) == (
        5,
        "tokenizer",
        2,
    )
    # the server's count stands, though its text "a b" would count 2
    assert (with_usage.output_tokens, with_usage.tokens_source) == (1, "usage")
    assert counter.cut("a b a b", 2) == "a b"
    with pytest.raises(ValueError, match="nothing is downloaded"):
        load_counter(tmp_path / "missing")
