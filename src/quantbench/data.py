"""The data files the pipeline reads, as params.yaml's `data:` section names them.

Each stage that reads one of these files checks it first (it exists, it is a regular file, it
is UTF-8, it holds something), so a missing or blank file is an error that names the key and the
path before any work, not a traceback minutes later. The files with a structure (the training
chats, the held-out questions) are also read whole by their own reader before any work
(:func:`quantbench.preflight.data_problems`): a bad line is refused with its number.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from quantbench.errors import UserError
from quantbench.settings import Settings
from quantbench.textfile import read_utf8


class DataFileError(UserError):
    """A data file params.yaml names is missing or empty."""


class DataSettings(Settings):
    train: Path = Field(Path("data/train.jsonl"), description="LoRA training chats (JSONL).")
    heldout: Path = Field(Path("data/heldout.jsonl"), description="Held-out questions (JSONL).")
    calibration: Path = Field(Path("data/calibration.txt"), description="Quantizer calibration.")
    eval: Path = Field(Path("data/eval.txt"), description="Perplexity/KL evaluation text.")
    corpus: list[Path] = Field(
        [Path("data/calibration.txt"), Path("data/eval.txt")],
        min_length=1,
        description="Text the named workloads cut their prompts from (no download: the "
        "project's own files).",
    )


def check_data_file(path: Path, key: str) -> Path:
    """``path`` if it is a UTF-8 file with something in it; an error naming ``key`` otherwise."""
    path = Path(path)
    if not path.is_file():
        raise DataFileError(
            f"{key}: {path} does not exist; give an existing file (paths are relative to the "
            "repository root)"
        )
    if not read_utf8(path, key).strip():
        raise DataFileError(
            f"{key}: {path} is empty (or only whitespace); give a file with content"
        )
    return path
