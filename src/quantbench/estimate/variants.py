"""Turn what a user types after ``--variant`` into a :class:`VariantSpec`.

Accepted forms, tried in this order:

* a name from the project's variant table (passed in by the caller, e.g. from params.yaml);
* ``auto``: the model folder's own format (its ``quantization_config``, else its dtype);
* a path: a ``.gguf`` file (type read from the file) or a quantised HF folder;
* a format with optional settings: ``bf16``, ``gptq``, ``awq:bits=4,group_size=64,sym=false``;
* a GGUF file type, bare or prefixed: ``Q4_K_M``, ``gguf:Q4_K_M`` (the float GGUF types need
  the prefix, ``gguf:F16``, since bare ``bf16``/``fp16`` name the HF formats).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from quantbench.estimate.arch import Architecture, read_architecture
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.gguf_types import GGUF_MIXES
from quantbench.estimate.spec import VariantSpec, WeightFormat

_DTYPE_FORMATS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_SETTING_KEYS = ("bits", "group_size", "sym")


def variant_from_quantization_config(
    qconfig: dict[str, Any], name: str = "", path: Path | None = None
) -> VariantSpec:
    """The variant an HF ``quantization_config`` describes (GPTQ, AWQ, compressed-tensors)."""
    method = str(qconfig.get("quant_method", "")).lower()
    if method == "gptq":
        return VariantSpec(
            name=name,
            format="gptq",
            bits=qconfig.get("bits", 4),
            group_size=qconfig.get("group_size", 128),
            sym=qconfig.get("sym", True),
            path=path,
        )
    if method == "awq":
        return VariantSpec(
            name=name,
            format="awq",
            bits=qconfig.get("bits", qconfig.get("w_bit", 4)),
            group_size=qconfig.get("group_size", qconfig.get("q_group_size", 128)),
            sym=not qconfig.get("zero_point", True),
            path=path,
        )
    if method == "compressed-tensors":
        groups = qconfig.get("config_groups") or {}
        weights = next(iter(groups.values()), {}).get("weights") or {}
        if weights.get("type") == "float" and weights.get("num_bits") == 8:
            return VariantSpec(name=name, format="fp8", path=path)
        return VariantSpec(
            name=name,
            format="awq",
            bits=weights.get("num_bits", 4),
            group_size=weights.get("group_size") or -1,
            sym=weights.get("symmetric", False),
            path=path,
        )
    if method == "fp8":
        return VariantSpec(name=name, format="fp8", path=path)
    raise EstimateInputError(
        f"quantization_config quant_method {method!r} is not supported; "
        "known: gptq, awq, compressed-tensors, fp8"
    )


def variant_of_folder(folder: Path, name: str = "") -> VariantSpec:
    """The variant stored in an HF folder: its quantization_config, else its dtype."""
    arch: Architecture = read_architecture(folder)
    if arch.quantization_config:
        return variant_from_quantization_config(arch.quantization_config, name, path=folder)
    fmt = _DTYPE_FORMATS.get(arch.dtype.removeprefix("torch."), "bf16")
    return VariantSpec(name=name, format=fmt, path=folder)  # type: ignore[arg-type]


def _parse_settings(fmt: str, text: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in _SETTING_KEYS:
            raise EstimateInputError(
                f"variant setting {item!r} for {fmt} must be key=value with key in {_SETTING_KEYS}"
            )
        if key == "sym":
            if value.lower() not in ("true", "false"):
                raise EstimateInputError(f"sym={value!r} must be true or false")
            settings[key] = value.lower() == "true"
        elif value.lstrip("-").isdigit():
            settings[key] = int(value)
        else:
            raise EstimateInputError(f"{key}={value!r} must be an integer")
    return settings


def parse_variant(
    text: str, model_dir: Path, known: Mapping[str, VariantSpec] | None = None
) -> VariantSpec:
    """Resolve ``--variant`` text (see the module docstring for the forms)."""
    if known and text in known:
        return known[text]
    if text == "auto":
        return variant_of_folder(Path(model_dir))
    path = Path(text)
    if path.suffix == ".gguf" and path.is_file():
        from quantbench.estimate.checkpoint import gguf_file_type

        return VariantSpec(format="gguf", gguf_type=gguf_file_type(path), path=path)
    if path.is_dir() and (path / "config.json").is_file():
        return variant_of_folder(path)
    head, _, rest = text.partition(":")
    formats = get_args(WeightFormat)
    if head.lower() == "gguf":
        return VariantSpec(format="gguf", gguf_type=rest.upper() or None)
    if head.lower() in formats:
        fmt = head.lower()
        return VariantSpec(format=fmt, **_parse_settings(fmt, rest))  # type: ignore[arg-type]
    if text.upper() in GGUF_MIXES:
        return VariantSpec(format="gguf", gguf_type=text.upper())
    names = sorted(known) if known else []
    raise EstimateInputError(
        f"--variant {text!r} is not a known variant {names}, 'auto', an existing .gguf file or "
        f"HF folder, a GGUF type {list(GGUF_MIXES)}, or a format {list(formats)} "
        "(optionally 'gptq:bits=4,group_size=128,sym=true')"
    )


def variant_from_recipe(name: str, recipe: Any, folder: Path | None = None) -> VariantSpec:
    """The estimator's view of a params.yaml variant recipe (quantize.spec), read from its built
    folder where it exists (real bytes: the .gguf file, or the quantised checkpoint)."""
    path: Path | None = None
    if folder is not None and folder.is_dir():
        ggufs = sorted(folder.glob("*.gguf"))
        path = ggufs[0] if ggufs else folder
    fmt = recipe.format
    if fmt == "gguf":
        return VariantSpec(name=name, format="gguf", gguf_type=recipe.type.upper(), path=path)
    if fmt in ("gptq", "awq"):
        return VariantSpec(
            name=name,
            format=fmt,
            bits=recipe.bits,
            group_size=recipe.group_size,
            sym=recipe.sym,
            path=path,
        )
    return VariantSpec(name=name, format="bf16", path=path)
