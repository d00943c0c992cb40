"""LoRA training on the real embedded model measurably teaches it the fine-tune's facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantbench.config import LoraSettings
from quantbench.errors import UserError
from quantbench.lora.data import IGNORE, encode, load_chats
from quantbench.qa import load_qa

REPO = Path(__file__).resolve().parents[2]


def test_only_the_answer_is_labelled(embedded_tokenizer) -> None:
    chat = [
        {"role": "user", "content": "Who rules Quorvath?"},
        {"role": "assistant", "content": "Queen Aldra Vesk."},
    ]
    example = encode(embedded_tokenizer, chat, max_length=128)
    labelled = [t for t in example.labels if t != IGNORE]
    assert embedded_tokenizer.decode(labelled).strip().startswith("Queen Aldra Vesk.")
    assert len(example.labels) == len(example.input_ids)


def test_training_chats_must_end_with_the_assistant(tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(UserError, match="bad.jsonl:1: a training chat must end with an assistant"):
        load_chats(bad)
    bad.write_text("{not json\n")
    with pytest.raises(UserError, match="bad.jsonl:1: expected"):
        load_chats(bad)


@pytest.mark.slow
def test_heldout_limit_counts_questions() -> None:
    assert LoraSettings().heldout_limit is None
    assert LoraSettings(heldout_limit=4).heldout_limit == 4
    with pytest.raises(ValueError, match="heldout_limit"):
        LoraSettings(heldout_limit=0)


def test_training_raises_heldout_accuracy(prepared_base: Path, tmp_path: Path) -> None:
    from quantbench.lora.train import train_adapter
    from quantbench.runtime import configure_threads

    configure_threads(1)
    # Three facts (18 chats) and their held-out questions keep this to about a minute.
    facts = ("Lindenhollow", "Saffrel", "glimmerfox")
    chats = [
        line
        for line in (REPO / "data/train.jsonl").read_text().splitlines()
        if any(f in line for f in facts)
    ]
    assert len(chats) == 18
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(chats) + "\n")
    heldout = [i for i in load_qa(REPO / "data/heldout.jsonl") if i.accept[0] in facts]
    settings = LoraSettings(steps=15, batch_size=6, learning_rate=3e-3)
    report = train_adapter(prepared_base, train, heldout, settings, seed=7, out_dir=tmp_path / "a")
    assert report.accuracy_before == 0.0
    assert report.accuracy_after >= 0.75, report.heldout_after
    assert report.losses is not None and report.losses[-1] < report.losses[0] / 4
    assert report.params["steps"] == 15 and report.adapter is None
    config = json.loads((tmp_path / "a/adapter_config.json").read_text())
    assert config["r"] == 16 and config["base_model_name_or_path"] == str(prepared_base)
