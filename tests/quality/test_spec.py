"""The evaluate: settings reject what cannot work."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from quantbench.quality.spec import EvaluateSettings


def test_defaults() -> None:
    settings = EvaluateSettings()
    assert (settings.context_length, settings.stride, settings.kl_percentile) == (512, 256, 99.0)


def test_stride_longer_than_the_window_is_an_error() -> None:
    with pytest.raises(ValidationError, match="stride"):
        EvaluateSettings(context_length=128, stride=256)


def test_unknown_keys_and_bad_percentiles_are_errors() -> None:
    with pytest.raises(ValidationError, match="ctx"):
        EvaluateSettings(ctx=512)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="kl_percentile"):
        EvaluateSettings(kl_percentile=100)


def test_interval_settings_default_to_95_percent_and_32_token_blocks() -> None:
    settings = EvaluateSettings()
    assert (settings.confidence, settings.bootstrap_block_tokens) == (0.95, 32)
    with pytest.raises(ValidationError, match="confidence"):
        EvaluateSettings(confidence=1.0)
    with pytest.raises(ValidationError, match="bootstrap_block_tokens"):
        EvaluateSettings(bootstrap_block_tokens=0)
