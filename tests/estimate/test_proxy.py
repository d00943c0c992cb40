"""The acceptance check on this machine: decode estimate vs a measured generate loop.

Slow: loads the embedded model and measures the machine. The measured side is a proxy (a
plain HF generate loop at batch 1), not the transformers engine's figure. Both sides run at
one thread, back to back, so that other load on the shared machine disturbs them alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.estimate.spec import EstimateSettings
from quantbench.estimate.stage import estimate_variant
from quantbench.schemas.estimate_inputs import EstimatedVariant


@pytest.mark.slow
@pytest.mark.timing  # measures this machine's rates: run alone
def test_decode_estimate_within_2x_of_the_generate_proxy(prepared_base: Path, tmp_path):
    from quantbench.estimate.proxy import measure_hf_generate

    model = prepared_base  # the embedded model, prepared by the library (session fixture)

    settings = EstimateSettings.model_validate(
        {
            "workload": {"input_len": 128, "output_len": 32, "concurrency": [1]},
            "measure": {"threads": 1, "cache_dir": str(tmp_path)},
        }
    )
    variant = EstimatedVariant(name="bf16", format="bf16")

    def proxy():
        return measure_hf_generate(model, "bf16", input_len=128, output_len=32, threads=1)

    # The proxy on both sides of the machine's probe (estimated once, then read from the cache
    # for the comparison), the less disturbed of the two kept: a 2-vCPU guest's speed swings
    # within minutes, and one slow spell during the proxy alone read as an optimistic estimate
    # (2.09x in one CI run, 0.9-1.8x in four runs beside it).
    before = proxy()
    estimate_variant(model, variant, "this", settings, [])
    after = proxy()
    measured = min(before, after, key=lambda point: point.tpot_ms)
    out = estimate_variant(model, variant, "this", settings, [measured])
    row = out["comparison"]["rows"][0]
    assert row["proxy"] and row["engine"] == "hf-generate-proxy"
    assert 0.5 <= row["tpot_ratio"] <= 2.0, row
