"""One reader of a model folder's config.json, used by every package."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from quantbench.errors import UserError
from quantbench.hfconfig import MissingConfigError, maybe_hf_config, read_hf_config, text_config

SRC = Path(__file__).resolve().parents[1] / "src" / "quantbench"


def test_reads_a_folder_or_a_file_and_says_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    assert read_hf_config(tmp_path) == {"hidden_size": 8}
    assert read_hf_config(tmp_path / "config.json") == {"hidden_size": 8}
    empty = tmp_path / "gguf-only"
    empty.mkdir()
    assert maybe_hf_config(empty) is None
    with pytest.raises(MissingConfigError, match="not a Hugging Face model folder"):
        read_hf_config(empty)
    (empty / "config.json").write_text("{oops")
    with pytest.raises(UserError, match="is not valid JSON"):
        read_hf_config(empty)
    (empty / "config.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="not a JSON object"):
        read_hf_config(empty)


def test_a_multimodal_config_gives_its_language_model() -> None:
    nested = {"model_type": "llava", "text_config": {"hidden_size": 4096}}
    assert text_config(nested) == {"hidden_size": 4096}
    assert text_config({"hidden_size": 8}) == {"hidden_size": 8}


def parses_config_json(text: str) -> bool:
    """Whether source text parses a config.json itself: inline, or through a variable."""
    if re.search(r"json\.loads?\(\(?[^\n]*[\"']config\.json[\"']\)?\.read_text", text):
        return True
    for var in re.findall(r"(\w+) = [^\n]*/ [\"']config\.json[\"']", text):
        if re.search(rf"json\.loads?\({var}\.read_text", text):
            return True
    return False


def test_no_other_module_parses_config_json_itself() -> None:
    """Five modules used to read config.json each in their own way (and disagreed on nesting)."""
    readers = [
        p.relative_to(SRC).as_posix()
        for p in SRC.rglob("*.py")
        if p.name != "hfconfig.py" and parses_config_json(p.read_text(encoding="utf-8"))
    ]
    assert readers == []


def test_the_scan_finds_the_old_readers() -> None:
    inline = 'config = json.loads((folder / "config.json").read_text(encoding="utf-8"))'
    through = 'path = Path(d) / "config.json"\nreturn json.loads(path.read_text(encoding="utf-8"))'
    other = 'gen = d / "generation_config.json"\njson.loads(gen.read_text())'
    assert parses_config_json(inline) and parses_config_json(through)
    assert not parses_config_json(other)
