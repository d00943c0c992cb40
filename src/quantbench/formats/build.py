"""What every format's builder receives and returns, and small helpers they share."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantbench.accelerator.nvidia import Device
from quantbench.formats.calibration import Calibration
from quantbench.native.dtype import compute_dtype

# Files a transformers model folder needs besides its weights (copied into HF-format variants so
# each folder loads on its own, chat template included).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "generation_config.json",
)


@dataclass(frozen=True)
class BuildRequest:
    """One variant to build: where from, where to, with what."""

    name: str
    spec: Any
    merged_dir: Path
    out_dir: Path
    calibration: Calibration | None
    threads: int
    device: Device = "cpu"
    """Where a calibrating quantizer computes (``runtime.device`` resolved); a copy or a
    conversion (bf16, gguf) runs on the CPU whatever it says."""


@dataclass
class BuildResult:
    """What a builder reports back: its main weights file and format-specific facts."""

    weights_file: str
    libraries: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


def copy_file(src: Path, dst: Path) -> None:
    """Copy contents only (no permissions or times: the output should not depend on them)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def copy_tokenizer(merged_dir: Path, out_dir: Path) -> None:
    """Make a variant folder self-contained with the merged model's tokenizer and chat template."""
    for name in TOKENIZER_FILES:
        src = merged_dir / name
        if src.is_file():
            copy_file(src, out_dir / name)


def hf_weights_file(model_dir: Path) -> str:
    """The file that names a transformers model's weights: the single file or the shard index."""
    for name in ("model.safetensors", "model.safetensors.index.json"):
        if (Path(model_dir) / name).is_file():
            return name
    raise FileNotFoundError(f"{model_dir} holds no model.safetensors (or shard index)")


def calibration_dtype(device: Device) -> str:
    """The dtype a quantizer calibrates in: bf16 on a GPU (its native matrix type), what this
    CPU computes fastest on the CPU (quantbench.native.dtype: float32 where bf16 is emulated).
    The checkpoint is saved in bf16 either way."""
    return "bfloat16" if device == "cuda" else compute_dtype()


def tokenize_calibration(tokenizer: Any, calibration: Calibration) -> list[dict[str, list[int]]]:
    """Token ids of each passage, cut at the recipe's max_tokens."""
    rows = []
    for text in calibration.texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: calibration.max_tokens]
        rows.append({"input_ids": list(ids), "attention_mask": [1] * len(ids)})
    return rows
