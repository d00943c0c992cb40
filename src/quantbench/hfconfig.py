"""A Hugging Face model folder's ``config.json``: the one reader every package uses.

The model's context, the widths preflight checks, the quantizers' source config, format
detection and the estimator's architecture all start from this file; reading it in one place
keeps the error (and the handling of multimodal configs that nest the language model under
``text_config``) the same everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quantbench.errors import UserError

CONFIG = "config.json"


class MissingConfigError(UserError, FileNotFoundError):
    """The folder holds no config.json: it is not a Hugging Face model folder."""


def config_path(path: str | Path) -> Path:
    """``path`` itself when it is a file, else its ``config.json``."""
    path = Path(path)
    return path if path.is_file() else path / CONFIG


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The parsed config of a model folder (or of a config file given directly)."""
    file = config_path(path)
    if not file.is_file():
        raise MissingConfigError(f"no {CONFIG} at {file}: not a Hugging Face model folder")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{file} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{file} holds {type(data).__name__}, not a JSON object")
    return data


def maybe_hf_config(path: str | Path) -> dict[str, Any] | None:
    """:func:`read_hf_config`, or None where there is no config.json (a GGUF's folder)."""
    return read_hf_config(path) if config_path(path).is_file() else None


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (multimodal configs nest it in ``text_config``)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config
