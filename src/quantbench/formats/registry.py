"""Formats by name: the built-in ones (imported when first asked for) and plugins' (registered).

A format module ends with ``register_format(MyFormat())``. ``recipe(raw)`` validates one entry of
``variants:`` with its format's recipe model; ``detect(folder)`` is the one place that tells which
format a checkpoint on disk is (each format's ``matches`` is asked in registration order, GGUF and
the quantized ones before plain bf16).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from quantbench.formats.base import Format, VariantSpecError, validate_name
from quantbench.hfconfig import maybe_hf_config
from quantbench.params import ConfigError, describe_errors
from quantbench.schemas import io as schema_io
from quantbench.schemas.variant import VariantRecord

if TYPE_CHECKING:
    from quantbench.formats.base import Format, Recipe

BUILTIN: dict[str, str] = {
    "gguf": "quantbench.formats.gguf",
    "gptq": "quantbench.formats.gptq",
    "awq": "quantbench.formats.awq",
    "w8a8": "quantbench.formats.w8a8",
    "rtn": "quantbench.formats.rtn",
    "bf16": "quantbench.formats.bf16",
}
_REGISTERED: dict[str, Format] = {}


def register_format(fmt: Format) -> Format:
    if not isinstance(fmt, Format):
        raise TypeError(f"register_format takes a Format instance, got {type(fmt).__name__}")
    _REGISTERED[fmt.name] = fmt
    return fmt


def format_names() -> list[str]:
    names = [n for n in BUILTIN if n != "bf16"]  # bf16 (no quantization) is asked last
    return [*names, *(n for n in _REGISTERED if n not in BUILTIN), "bf16"]


def get_format(name: str) -> Format:
    if name not in _REGISTERED and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    if name not in _REGISTERED:
        raise VariantSpecError(
            f"unknown variant format {name!r}; known formats: {', '.join(format_names())}"
        )
    return _REGISTERED[name]


def known_format(name: str) -> Format | None:
    """The format ``name`` where it is built in or registered, else None (no error)."""
    if name in BUILTIN or name in _REGISTERED:
        return get_format(name)
    return None


def all_formats() -> dict[str, Format]:
    return {name: get_format(name) for name in format_names()}


def format_of_file(path: Path) -> Format | None:
    """The format whose variants are one file such as ``path`` (``Format.file_suffix``: a
    ``.gguf``), None where no format's are (``path`` is then no variant by itself)."""
    suffix = Path(path).suffix
    return next((f for f in all_formats().values() if suffix and f.file_suffix == suffix), None)


def variant_file(folder: Path, fmt: str) -> Path | None:
    """The one file a variant of format ``fmt`` is, in ``folder`` (None: the format's variants
    are folders, or it is not known here); VariantSpecError where the folder holds none of them,
    or several."""
    found = known_format(fmt)
    suffix = found.file_suffix if found is not None else None
    if suffix is None:
        return None
    files = sorted(Path(folder).glob(f"*{suffix}"))
    if len(files) != 1:
        raise VariantSpecError(f"{folder}: expected exactly one {suffix} file, found {len(files)}")
    return files[0]


def recipe(raw: Any) -> Recipe:
    """One ``variants:`` entry validated by its format's recipe model."""
    if isinstance(raw, dict) and "format" in raw and not isinstance(raw.get("format"), str):
        raise ValueError(f"format must be a name, got {raw['format']!r}")
    if not isinstance(raw, dict) or "format" not in raw:
        raise ValueError(
            f"each variant needs a 'format' ({', '.join(format_names())}), got {raw!r}"
        )
    return get_format(raw["format"]).recipe_model.model_validate(raw)


def variant_recipe(raw: dict[str, Any], name: str, origin: str = "params.yaml") -> Recipe:
    """``variants.<name>`` of a params mapping, validated by its format's recipe model; the
    ConfigError names the key, the value and what is allowed."""

    variants = raw.get("variants") or {}
    if not isinstance(variants, dict) or name not in variants:
        known = ", ".join(sorted(variants)) if isinstance(variants, dict) else ""
        raise ConfigError(f"no variant {name!r} under `variants:` in {origin}; known: {known}")
    entry = variants[name]
    try:
        validate_name(name)
        return recipe(entry)
    except ValidationError as exc:
        lines = describe_errors(exc, f"variants.{name}", get_format(entry["format"]).recipe_model)
        raise ConfigError(f"{origin} is not valid:\n  " + "\n  ".join(lines)) from None
    except (VariantSpecError, ValueError) as exc:
        raise ConfigError(f"{origin} is not valid:\n  variants.{name}: {exc}") from None


def detect(folder: Path) -> str:
    """The format of the checkpoint in ``folder`` (a variant folder, an HF folder, a GGUF's)."""
    folder = Path(folder)
    info = folder / "variant.json"
    if info.is_file():
        return schema_io.read(info, VariantRecord, name=folder.name).format
    config = maybe_hf_config(folder)
    for name, fmt in all_formats().items():
        if fmt.matches(folder, config):
            return name
    method = ((config or {}).get("quantization_config") or {}).get("quant_method")
    raise VariantSpecError(
        f"{folder}: no known format matches this checkpoint"
        + (f" (quantization method {method!r})" if method else "")
        + f"; known formats: {', '.join(format_names())}"
    )


__all__ = [
    "ValidationError",
    "detect",
    "format_names",
    "format_of_file",
    "get_format",
    "recipe",
    "register_format",
    "variant_file",
]
