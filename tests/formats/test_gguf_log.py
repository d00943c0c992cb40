"""A GGUF build says what llama.cpp's quantizer did in one line, not in its log's hundreds.

llama_model_quantize logs its loader's metadata and a line per tensor, and a warning per tensor
that falls back to another type: one default run's two GGUF quantize stages wrote about 800 such
lines into the run's log (quantbench.native.llama_log keeps them out).
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from types import ModuleType

import pytest

from quantbench.formats.gguf import read_summary
from quantbench.formats.registry import recipe
from quantbench.native.llama_build import load_binding
from quantbench.quantize import build_variant

# llama_model_quantize's own lines (llama.cpp b5xxx, as the pinned release prints them), cut
LOG = """\
llama_model_loader: - type  f32:   61 tensors
llama_model_loader: - type  f16:  211 tensors
warning: blk.0.attn_k.weight                  - ncols    576 not divisible by 256 (required for type    q4_K) -> falling back to    q5_0
warning: blk.0.attn_v.weight                  - ncols    576 not divisible by 256 (required for type    q6_K) -> falling back to    q8_0
[   1/ 272]                   output_norm.weight - [   576,      1,      1,      1], type =    f32, size =    0.002 MiB
[   2/ 272]                    token_embd.weight - [   576,  49152,      1,      1], type =    f16, converting to q8_0 .. size =    54.00 MiB ->    28.69 MiB
llama_model_quantize_impl: model size  =   256.63 MiB (16.00 BPW)
llama_model_quantize_impl: quant size  =    98.87 MiB (6.17 BPW)
llama_model_quantize_impl: WARNING: 2 of 272 tensor(s) required fallback quantization
"""


def callback(binding: ModuleType) -> int | None:
    """The address of llama.cpp's current log callback (None: its default, stderr)."""
    current, data = binding.llama_log_callback(), ctypes.c_void_p()
    binding.llama_log_get(ctypes.byref(current), ctypes.byref(data))
    return ctypes.cast(current, ctypes.c_void_p).value


def test_the_quantizers_log_is_read_into_what_it_did() -> None:
    summary = read_summary(LOG.splitlines())
    assert summary.tensors == 272
    assert summary.fallback_tensors == 2 and summary.fallback_to == {"q5_0": 1, "q8_0": 1}
    assert (summary.source_mib, summary.quantized_mib) == (256.63, 98.87)
    assert summary.details() == {
        "tensors": 272,
        "fallback_tensors": 2,
        "fallback_to": {"q5_0": 1, "q8_0": 1},
    }
    assert summary.line("Q4_K_M") == (
        "llama.cpp quantized 272 tensors to Q4_K_M (256.6 -> 98.9 MiB of tensors); 2 of them "
        "in another type (q5_0 1, q8_0 1), their rows not a multiple of Q4_K_M's block"
    )
    # nothing to read (a converter type: no quantize step): nothing recorded
    assert read_summary([]).details() == {}


@pytest.mark.slow
def test_a_gguf_build_writes_a_line_not_llama_cpps_log(
    prepared_base: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog
) -> None:
    caplog.set_level(logging.INFO, logger="quantbench")
    binding = load_binding()
    before = callback(binding)
    spec = recipe({"format": "gguf", "type": "Q4_K_M"})
    info = build_variant("q4", spec, prepared_base, tmp_path / "q4", None, threads=1)
    out, err = capfd.readouterr()
    written = (out + err).splitlines()
    # the old build wrote about 490 lines here: the loader's keys and a line per tensor
    assert len(written) <= 3, written[:20]
    assert not [line for line in written if "llama_model_loader" in line or "/ 272]" in line]
    # what mattered, in variant.json and one log line: SmolLM2's rows of 576 are not a multiple
    # of the K-quants' 256, so most of its "Q4_K_M" tensors are q5_0 (docs/QUANTIZE.md)
    details = info.record.details
    assert details["tensors"] == 272
    assert details["fallback_tensors"] == sum(details["fallback_to"].values()) > 100
    said = [r.getMessage() for r in caplog.records if r.name == "quantbench.formats.gguf"]
    assert said and said[0].startswith("llama.cpp quantized 272 tensors to Q4_K_M")
    # and llama.cpp logs where it did before the build
    assert callback(binding) == before


@pytest.mark.slow
def test_a_failed_quantize_says_why_from_llama_cpps_log(tmp_path: Path) -> None:
    """The log kept out of the output is what a failure needs: its end is in the error."""
    from quantbench.formats.gguf import GgufBuildError, quantize

    source = tmp_path / "not-a-model.gguf"
    source.write_bytes(b"GGUF but not one")
    with pytest.raises(GgufBuildError, match=r"(?s)failed \(status \d+\); the end of its log:\n.+"):
        quantize(source, tmp_path / "out.gguf", "Q4_K_M", threads=1)
