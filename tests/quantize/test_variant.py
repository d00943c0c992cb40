"""variant.json: complete, and identical when the folder is."""

from __future__ import annotations

import hashlib
import json

import pytest

from quantbench.formats.gguf import GgufSpec
from quantbench.formats.gptq import _strip_times
from quantbench.quantize.variant import VARIANT_JSON, read_variant, write_variant_json


def _describe(folder, source):
    return write_variant_json(
        folder,
        name="gguf-q8_0",
        recipe=GgufSpec(format="gguf", type="Q8_0"),
        weights_file="model-Q8_0.gguf",
        source=source,
        calibration=None,
        libraries={"llama-cpp-python": "0.3.36"},
        num_parameters=1000,
    )


def test_describes_files_sizes_and_recipe(tmp_path) -> None:
    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "model-Q8_0.gguf").write_bytes(b"x" * 1062)
    info = _describe(folder, {"path": "models/merged", "sha256": "ab"})
    data = json.loads((folder / VARIANT_JSON).read_text())
    assert data["files"]["model-Q8_0.gguf"] == {
        "bytes": 1062,
        "sha256": hashlib.sha256(b"x" * 1062).hexdigest(),
    }
    assert data["recipe"] == {"format": "gguf", "type": "Q8_0", "intermediate": "f16"}
    assert data["gguf_type"] == "Q8_0" and data["format"] == "gguf"
    assert data["size_bytes"] == 1062 and data["bits_per_weight"] == pytest.approx(8.496)
    assert info.weights_path == folder / "model-Q8_0.gguf"
    assert data["schema_version"] == 1 and data["source"]["weights_sha256"] == {}
    assert read_variant(folder).record == info.record
    assert info.record.model_dump(mode="json") == data


def test_same_folder_gives_byte_identical_json(tmp_path) -> None:
    texts = []
    for run in ("a", "b"):
        folder = tmp_path / run
        folder.mkdir()
        (folder / "model-Q8_0.gguf").write_bytes(b"weights")
        _describe(folder, {"path": "models/merged", "sha256": "ab"})
        texts.append((folder / VARIANT_JSON).read_bytes())
    assert texts[0] == texts[1]


def test_missing_weights_file_is_an_error(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="model-Q8_0.gguf"):
        _describe(tmp_path, {})
    with pytest.raises(FileNotFoundError, match="variant.json"):
        read_variant(tmp_path / "nothing")


def test_gptq_log_loses_times_and_gets_a_stable_order(tmp_path) -> None:
    log = tmp_path / "quant_log.csv"
    log.write_text(
        "layer,module,loss,samples,damp,time\n"
        "1,mlp.up_proj,0.5,10,0.05,0.7\n"
        "0,self_attn.q_proj,0.1,10,0.05,0.2\n"
        "10,mlp.down_proj,0.9,10,0.05,0.1\n"
        "0,mlp.down_proj,0.2,10,0.05,0.3\n"
    )
    summary = _strip_times(log)
    assert log.read_text().splitlines() == [
        "layer,module,loss,samples,damp",
        "0,mlp.down_proj,0.2,10,0.05",
        "0,self_attn.q_proj,0.1,10,0.05",
        "1,mlp.up_proj,0.5,10,0.05",
        "10,mlp.down_proj,0.9,10,0.05",
    ]
    assert summary["max"] == 0.9 and summary["max_module"] == "layer 10 mlp.down_proj"
    assert summary["modules"] == 4
