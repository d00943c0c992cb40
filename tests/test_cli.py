"""The `quantbench` command: validation prints settings, bad params exit 2 with the message."""

from __future__ import annotations

from pathlib import Path

from quantbench.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_validate_prints_sections(capsys) -> None:
    assert main(["validate", "--params", str(REPO / "params.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "lora:" in out and "merge:" in out


def test_validate_bad_params_exits_2(tmp_path, capsys) -> None:
    bad = tmp_path / "params.yaml"
    bad.write_text("lora:\n  r: 0\n")
    assert main(["validate", "--params", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "lora.r: got 0" in err


def test_the_load_test_of_a_running_server_is_quantbench_load() -> None:
    """`quantbench bench` ran a load test, not the pipeline's bench stages (one word, two
    ideas): it is `quantbench load` now, and `bench` is kept as an alias for old scripts."""
    from quantbench.cli import build_parser
    from quantbench.cli.load import run_load

    parser = build_parser()
    for word in ("load", "bench"):
        args = parser.parse_args([word, "--url", "http://127.0.0.1:1", "--concurrency", "2"])
        assert args.handler is run_load


def test_validate_names_the_device_it_found(fake_gpu, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["validate", "--params", str(REPO / "params.yaml"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "device: cuda (1 x NVIDIA H100 80GB HBM3 (compute capability 9.0" in out


def test_validate_names_the_cpu_where_there_is_no_gpu(no_gpu, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["validate", "--params", str(REPO / "params.yaml"), "--quiet"]) == 0
    assert "device: cpu (no NVIDIA GPU" in capsys.readouterr().out


def test_cuda_asked_on_a_cpu_machine_is_refused_before_work(no_gpu, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["runtime"]["device"] = "cuda"
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    assert main(["validate", "--params", str(path)]) == 2
    err = capsys.readouterr().err
    assert "runtime.device: 'cuda', but this machine has no NVIDIA GPU" in err
    assert "set it to auto" in err
