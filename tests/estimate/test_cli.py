"""``quantbench estimate`` end to end on a tiny model (no measurement, no network)."""

from __future__ import annotations

import json

from quantbench.cli.estimate import main


def test_prints_the_analysis_and_writes_json(tiny_folder, tmp_path, capsys):
    out_path = tmp_path / "estimate.json"
    code = main(
        [
            "--model",
            str(tiny_folder),
            "--variant",
            "Q8_0",
            "--hardware",
            "L4",
            "--input-len",
            "64",
            "--output-len",
            "16",
            "--concurrency",
            "1,4",
            "--json",
            str(out_path),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    for section in ("Roofline", "Per concurrency", "Concurrency limits", "sweep grids"):
        assert section in printed
    data = json.loads(out_path.read_text())
    assert data["variant"]["gguf_type"] == "Q8_0"
    assert [p["concurrency"] for p in data["points"]][:2] == [1, 4]


def test_measured_points_are_compared(tiny_folder, tmp_path, capsys):
    measured = tmp_path / "measured.json"
    measured.write_text(
        json.dumps(
            [
                {
                    "variant": "bf16",
                    "engine": "transformers",
                    "concurrency": 1,
                    "tpot_ms": 0.5,
                    "hardware": "L4",
                },
            ]
        )
    )
    code = main(
        [
            "--model",
            str(tiny_folder),
            "--variant",
            "bf16",
            "--hardware",
            "L4",
            "--measured",
            str(measured),
        ]
    )
    assert code == 0
    assert "Estimate vs measured" in capsys.readouterr().out


def test_bad_input_exits_2_with_the_reason(tiny_folder, capsys):
    assert main(["--model", str(tiny_folder), "--variant", "int3"]) == 2
    assert "'int3'" in capsys.readouterr().err
    assert main(["--model", str(tiny_folder), "--hardware", "TPU9"]) == 2
    assert "'TPU9'" in capsys.readouterr().err


def test_proxy_only_compares_with_this_machine(tiny_folder, capsys):
    assert main(["--model", str(tiny_folder), "--hardware", "L4", "--proxy"]) == 2
    assert "--proxy measures this machine" in capsys.readouterr().err
