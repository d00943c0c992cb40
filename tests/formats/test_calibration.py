"""Calibration passages: split at blank lines, taken in file order, hashed."""

from __future__ import annotations

import hashlib

import pytest

from quantbench.formats.base import CalibrationSpec, VariantSpecError
from quantbench.formats.calibration import load_calibration, split_passages


def test_passages_split_at_blank_lines() -> None:
    text = "one\nline two\n\n\n  \nthree\r\n\r\nfour  \n"
    assert split_passages(text) == ["one\nline two", "three", "four"]


def test_first_samples_in_file_order_and_hash(tmp_path) -> None:
    path = tmp_path / "cal.txt"
    path.write_text("a a a\n\nb b\n\nc\n", encoding="utf-8")
    cal = load_calibration("v", path, CalibrationSpec(samples=2, max_tokens=64))
    assert cal.texts == ["a a a", "b b"]
    assert cal.available == 3
    assert cal.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert cal.describe()["samples_used"] == 2
    assert load_calibration("v", path, CalibrationSpec()).texts == ["a a a", "b b", "c"]


def test_missing_or_empty_file_names_the_variant(tmp_path) -> None:
    with pytest.raises(VariantSpecError, match="'gptq-x'.*missing.txt"):
        load_calibration("gptq-x", tmp_path / "missing.txt", CalibrationSpec())
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    with pytest.raises(VariantSpecError, match="no passages"):
        load_calibration("gptq-x", empty, CalibrationSpec())
