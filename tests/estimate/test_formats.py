"""Nominal weight bytes per format, counted by hand on the tiny config."""

from __future__ import annotations

import pytest

from quantbench.estimate.arch import architecture_from_config
from quantbench.estimate.formats import group_quant_bytes, nominal_weight_bytes
from quantbench.schemas.estimate_inputs import EstimatedVariant

from .conftest import TINY_CONFIG

# tiny: 1152 body weights, 256 embedding (tied head), 40 norm weights
BODY, EMBEDDING, NORMS = 1152, 256, 40


def test_bf16(tiny):
    w = nominal_weight_bytes(tiny, EstimatedVariant(format="bf16"))
    assert w.stored_bytes == 2 * (BODY + EMBEDDING + NORMS)
    assert w.streamed_bytes == w.stored_bytes  # tied: the embedding is read whole as the head
    assert w.gathered_bytes_per_token == 8 * 2
    assert w.bits_per_weight == 16.0
    assert w.compute_dtype == "bf16"
    assert w.source == "nominal"


def test_untied_embedding_is_not_streamed():
    arch = architecture_from_config({**TINY_CONFIG, "tie_word_embeddings": False})
    w = nominal_weight_bytes(arch, EstimatedVariant(format="fp16"))
    assert w.stored_bytes == 2 * (BODY + 2 * EMBEDDING + NORMS)
    assert w.streamed_bytes == 2 * (BODY + EMBEDDING + NORMS)


def test_gptq_by_hand(tiny):
    # w4, groups of 8: each row of 8 inputs has one group, rows of 16 inputs two;
    # per group a 16-bit scale and a 4-bit zero (GPTQ stores zeros even when symmetric).
    w = nominal_weight_bytes(tiny, EstimatedVariant(format="gptq", group_size=8))
    per_layer = (
        (64 * 0.5 + 8 * 2.5)  # q 8x8
        + 2 * (32 * 0.5 + 4 * 2.5)  # k, v 4x8
        + (64 * 0.5 + 8 * 2.5)  # o 8x8
        + 2 * (128 * 0.5 + 16 * 2.5)  # gate, up 16x8
        + (128 * 0.5 + 8 * 2 * 2.5)  # down 8x16
    )
    assert per_layer == 468
    assert w.stored_bytes == 2 * per_layer + 2 * EMBEDDING + 2 * NORMS
    assert w.compute_dtype == "bf16"


def test_awq_zero_points_only_when_asymmetric(tiny):
    asym = nominal_weight_bytes(tiny, EstimatedVariant(format="awq", group_size=8))
    sym = nominal_weight_bytes(tiny, EstimatedVariant(format="awq", group_size=8, sym=True))
    groups = 2 * (8 + 4 + 4 + 8 + 16 + 16 + 16)  # rows x groups per row, both layers
    assert asym.stored_bytes - sym.stored_bytes == groups * 4 / 8


def test_group_formula_on_a_large_matrix():
    from quantbench.schemas.roofline import WeightTensor

    t = WeightTensor(role="attn_q", layer=0, rows=4096, cols=4096)
    bits = group_quant_bytes(t, bits=4, group_size=128, zeros=True) * 8 / t.elements
    assert bits == pytest.approx(4 + (16 + 4) / 128)
    per_row = group_quant_bytes(t, bits=4, group_size=-1, zeros=False) * 8 / t.elements
    assert per_row == pytest.approx(4 + 16 / 4096)


def test_fp8_keeps_edges_in_bf16_and_adds_row_scales(tiny):
    w = nominal_weight_bytes(tiny, EstimatedVariant(format="fp8"))
    rows = 2 * (8 + 4 + 4 + 8 + 16 + 16 + 8)
    assert w.stored_bytes == BODY + 4 * rows + 2 * EMBEDDING + 2 * NORMS
    assert w.compute_dtype == "fp8"


def test_gguf_q8_0_computes_in_int8(smol):
    w = nominal_weight_bytes(smol, EstimatedVariant(format="gguf", gguf_type="Q8_0"))
    assert w.compute_dtype == "int8"
    assert w.bits_per_weight == pytest.approx(8.5, abs=0.01)
    f16 = nominal_weight_bytes(smol, EstimatedVariant(format="gguf", gguf_type="F16"))
    assert f16.compute_dtype == "fp16"


def test_four_bit_formats_are_smaller_than_eight_and_sixteen(smol):
    bits = {
        name: nominal_weight_bytes(smol, EstimatedVariant.model_validate(spec)).bits_per_weight
        for name, spec in {
            "bf16": {"format": "bf16"},
            "q8": {"format": "gguf", "gguf_type": "Q8_0"},
            "gptq": {"format": "gptq"},
            "q4km": {"format": "gguf", "gguf_type": "Q4_K_M"},
        }.items()
    }
    assert bits["bf16"] > bits["q8"] > bits["gptq"] and bits["q8"] > bits["q4km"]


def test_a_new_weight_layout_is_registered_not_written_into_the_estimator(tiny) -> None:
    """A format stored in a new way (bitsandbytes NF4: 4-bit codes, one 16-bit absmax per block
    of 64) registers its layout; EstimatedVariant takes it, with the fields it declares, and
    the estimator counts its bytes. Unregistered, it is refused with the known layouts."""
    from pydantic import ValidationError

    from quantbench.estimate import formats
    from quantbench.schemas.estimate_inputs import WEIGHT_LAYOUTS, LayoutFields

    with pytest.raises(ValidationError, match="'nf4' is not a weight layout.*known: bf16"):
        EstimatedVariant(format="nf4", bits=4, group_size=64)

    def nf4(variant, arch, t):
        blocks = t.elements / variant.group_size
        return "nf4", t.elements * variant.bits / 8 + blocks * 2

    formats.register_layout(
        formats.Layout(
            "nf4", "4-bit codes + a 16-bit absmax per block", nf4,
            lambda variant, arch, types: "bf16", file_compute=lambda variant: None,
            fields=LayoutFields(frozenset({"bits", "group_size"}), {"bits": 4, "group_size": 8}),
        )
    )  # fmt: skip
    try:
        variant = EstimatedVariant(format="nf4")  # the layout's defaults
        assert (variant.bits, variant.group_size, variant.label) == (4, 8, "nf4-w4g8")
        with pytest.raises(ValidationError, match="sym does not apply to format nf4"):
            EstimatedVariant(format="nf4", sym=True)
        w = nominal_weight_bytes(tiny, variant)
        every = BODY + EMBEDDING  # this layout quantises the embedding too
        assert w.stored_bytes == every * 0.5 + every / 8 * 2 + 2 * NORMS
        assert w.detail == "nf4-w4g8: 4-bit codes + a 16-bit absmax per block"
    finally:
        formats._LAYOUTS.pop("nf4")
        WEIGHT_LAYOUTS.pop("nf4")
    with pytest.raises(formats.EstimateInputError, match="'nf4' is unknown to the estimator"):
        formats.get_layout("nf4")


def test_every_declared_layout_is_counted_and_every_counted_one_declared() -> None:
    """The built-in layouts are declared once (WEIGHT_LAYOUTS, which a stored estimate reads
    by); the estimator's registry counts the bytes of each, with the fields declared there."""
    from quantbench.estimate import formats
    from quantbench.schemas.estimate_inputs import WEIGHT_LAYOUTS

    assert set(formats.layout_names()) == set(WEIGHT_LAYOUTS)
    assert all(formats.get_layout(name).fields is None for name in WEIGHT_LAYOUTS)


def test_a_layout_without_fields_needs_a_declared_name(tiny) -> None:
    from quantbench.estimate import formats

    with pytest.raises(formats.EstimateInputError, match="'nf4' declares no fields"):
        formats.register_layout(
            formats.Layout(
                "nf4", "4-bit codes", lambda variant, arch, t: ("nf4", 0.0),
                lambda variant, arch, types: "bf16", file_compute=lambda variant: None,
            )
        )  # fmt: skip
    assert "nf4" not in formats.layout_names()
