"""tools/stage_times.py times each stage from DVC's "Running stage" lines."""

from __future__ import annotations

from pathlib import Path

from tools import stage_times


def test_a_stage_lasts_until_the_next_one_starts_and_the_last_until_the_end() -> None:
    lines = [
        (100.0, "python -m quantbench.cli validate --quiet"),
        (103.0, "Running stage 'prepare':"),
        (110.0, "> python stages/prepare.py"),
        (123.5, "Running stage 'quantize@gptq-w4g64':"),
        (150.0, "Running stage 'quantize@awq-w4g64':"),
        (200.0, "outputs: models/ (weights, DVC-cached) and reports/ (JSON reports)"),
    ]
    stages, total = timed = stage_times.stage_seconds(lines)
    assert stages == [
        ("prepare", 20.5),
        ("quantize@gptq-w4g64", 26.5),
        ("quantize@awq-w4g64", 50.0),
    ]
    assert total == 100.0
    text = stage_times.table(*timed)
    assert "quantize" in text and "76.5" in text  # the kind's total
    assert "(1.7 minutes)" in text


def test_a_stamped_log_is_read_back(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "repro.log"
    log.write_text("5.0 Running stage 'merge':\n9.0 Running stage 'report':\n\rbar\n10.0 done\n")
    assert stage_times.main(["--read", str(log)]) == 0
    out = capsys.readouterr().out
    assert "merge" in out and "4.0" in out and "report" in out
