"""Round-to-nearest: the grid it rounds to, exactly, and the variant it builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantbench.formats.registry import detect, recipe
from quantbench.formats.rtn import MARKER, round_to_nearest
from quantbench.quantize import build_variant

REPO = Path(__file__).resolve().parents[2]


def test_symmetric_grid_is_max_abs_over_seven_at_four_bits() -> None:
    import torch

    w = torch.tensor([[0.7, -0.35, 0.1, -0.05]])
    out = round_to_nearest(w, bits=4, group_size=4, sym=True)
    scale = 0.7 / 7
    assert torch.allclose(out, torch.tensor([[7, -4, 1, -0]]) * scale)  # -3.5 rounds to -4
    # the extreme is held exactly, -max|w| would clip at -8 only beyond it
    assert out[0, 0] == pytest.approx(0.7)


def test_asymmetric_grid_holds_min_and_max() -> None:
    import torch

    torch.manual_seed(0)
    w = torch.randn(8, 64) * 0.02 + 0.01
    out = round_to_nearest(w, bits=4, group_size=32, sym=False)
    for g in range(2):
        part, rounded = w[:, g * 32 : (g + 1) * 32], out[:, g * 32 : (g + 1) * 32]
        low, high = part.amin(dim=1), part.amax(dim=1)
        step = (high - low) / 15
        # every value is within half a step, and at most 16 levels per row and group
        assert ((rounded - part).abs() <= step[:, None] / 2 + 1e-7).all()
        assert all(len(set(r.tolist())) <= 16 for r in rounded)


def test_fewer_bits_round_more_coarsely() -> None:
    import torch

    torch.manual_seed(1)
    w = torch.randn(16, 128)
    errors = [
        (round_to_nearest(w, bits, 64, True) - w).pow(2).mean().item() for bits in (8, 4, 3, 2)
    ]
    assert errors == sorted(errors) and errors[0] < errors[-1] / 100


def test_a_group_that_does_not_divide_the_row_is_refused() -> None:
    import torch

    with pytest.raises(ValueError, match="does not divide"):
        round_to_nearest(torch.zeros(2, 48), 4, 32, True)


def test_rtn_builds_a_dequantized_checkpoint_detected_as_rtn(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    spec = recipe({"format": "rtn", "bits": 4, "group_size": 32, "sym": True})
    built = build_variant("rtn", spec, tiny_model_dir, tmp_path / "rtn", None, threads=1)
    assert detect(built.directory) == "rtn"
    record = json.loads((built.directory / MARKER).read_text())
    assert record["quantized_linears"] == 2 * 7 and record["bits"] == 4
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    rounded = AutoModelForCausalLM.from_pretrained(built.directory, dtype=torch.float32)
    name = "model.layers.1.mlp.down_proj.weight"
    w, q = base.state_dict()[name], rounded.state_dict()[name]
    # at most 16 levels per row and group of 32, none farther than half a step (plus bf16's
    # rounding of the stored level x scale: 2^-9 of a value at most 8 steps)
    groups = q.reshape(q.shape[0], -1, 32)
    assert max(len(set(g.tolist())) for row in groups for g in row) <= 16
    step = w.reshape(w.shape[0], -1, 32).abs().amax(-1, keepdim=True) / 7
    assert ((groups - w.reshape_as(groups)).abs() <= step * (0.5 + 8 / 512)).all()
    # the embeddings and the LM head are left as they were
    assert torch.equal(
        base.state_dict()["model.embed_tokens.weight"],
        rounded.state_dict()["model.embed_tokens.weight"],
    )
