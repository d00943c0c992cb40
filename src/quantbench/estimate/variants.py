"""Turn what a user types after ``--variant`` into a :class:`EstimatedVariant`.

Accepted forms, tried in this order:

* a name from the project's variant table (passed in by the caller, e.g. from params.yaml);
* ``auto``: the model folder's own format (its ``quantization_config``, else its dtype);
* a path: a ``.gguf`` file (type read from the file) or a quantised HF folder;
* a format with optional settings: ``bf16``, ``gptq``, ``awq:bits=4,group_size=64,sym=false``;
* a GGUF file type, bare or prefixed: ``Q4_K_M``, ``gguf:Q4_K_M`` (the float GGUF types need
  the prefix, ``gguf:F16``, since bare ``bf16``/``fp16`` name the HF formats).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from quantbench.estimate.arch import read_architecture
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.formats import layout_names
from quantbench.formats.base import VariantSpecError
from quantbench.formats.registry import (
    all_formats,
    detect,
    format_of_file,
    get_format,
    variant_file,
    variant_recipe,
)
from quantbench.hfconfig import maybe_hf_config
from quantbench.schemas.estimate_inputs import (
    GGUF_LAYOUT,
    GGUF_MIXES,
    WEIGHT_LAYOUTS,
    EstimatedVariant,
)
from quantbench.schemas.roofline import ModelShape

_SETTING_KEYS = ("bits", "group_size", "sym")


def _is_fp8(qconfig: dict[str, Any]) -> bool:
    """fp8 checkpoints: not a project format, but the estimator costs them (vLLM serves them)."""
    method = str(qconfig.get("quant_method", "")).lower()
    if method == "fp8":
        return True
    groups = qconfig.get("config_groups") or {}
    weights = (next(iter(groups.values()), {}) or {}).get("weights") or {}
    return method == "compressed-tensors" and weights.get("type") == "float"


def variant_from_config(
    config: dict[str, Any] | None, name: str = "", path: Path | None = None
) -> EstimatedVariant:
    """The variant a checkpoint's config.json describes, through the one format detector
    (quantbench.formats.registry); fp8 checkpoints, which no project format makes, directly."""
    qconfig = (config or {}).get("quantization_config") or {}
    if qconfig and _is_fp8(qconfig):
        return EstimatedVariant(name=name, format="fp8", path=path)
    for fmt in all_formats().values():
        # a format whose variants are one file (a .gguf) is read from the file, not a config
        if fmt.file_suffix is None and fmt.matches(path or Path("."), config):
            return EstimatedVariant(
                name=name, path=path, **fmt.estimator_fields(None, path, config)
            )
    method = qconfig.get("quant_method")
    raise EstimateInputError(
        f"quantization_config quant_method {method!r} is not supported; known formats: "
        f"{', '.join(all_formats())} (and fp8)"
    )


def variant_from_quantization_config(
    qconfig: dict[str, Any], name: str = "", path: Path | None = None
) -> EstimatedVariant:
    """The variant an HF ``quantization_config`` describes (GPTQ, AWQ, compressed-tensors)."""
    return variant_from_config({"quantization_config": qconfig}, name, path)


def variant_of_folder(folder: Path, name: str = "") -> EstimatedVariant:
    """The variant stored in an HF folder: its quantization_config, else its dtype."""
    arch: ModelShape = read_architecture(folder)
    config = {"quantization_config": arch.quantization_config, "dtype": arch.dtype}
    return variant_from_config(config, name, path=folder)


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
    text: str, model_dir: Path, known: Mapping[str, EstimatedVariant] | None = None
) -> EstimatedVariant:
    """Resolve ``--variant`` text (see the module docstring for the forms)."""
    if known and text in known:
        return known[text]
    if text == "auto":
        return variant_of_folder(Path(model_dir))
    path = Path(text)
    if path.is_dir():
        # the one format detector (variant.json first, then each format's own rule), so a folder
        # is the same format here as where it is served; fp8, which no format makes, falls through
        single = None
        # no format's (fp8), or not the one file of a one-file format's variant: read on
        with contextlib.suppress(VariantSpecError):
            single = variant_file(path, detect(path))
        if single is not None:
            path = single
        elif (path / "config.json").is_file():
            return variant_of_folder(path)
    one_file = format_of_file(path) if path.is_file() else None
    if one_file is not None:  # a .gguf: its format reads the file
        return EstimatedVariant(path=path, **one_file.estimator_fields(None, path, None))
    head, _, rest = text.partition(":")
    formats = layout_names()
    if head.lower() in formats:
        fmt = head.lower()
        if "gguf_type" in WEIGHT_LAYOUTS[fmt].fields:  # `gguf:Q4_K_M`: the file type, bare
            return EstimatedVariant(format=fmt, gguf_type=rest.upper() or None)
        return EstimatedVariant(format=fmt, **_parse_settings(fmt, rest))  # type: ignore[arg-type]
    if text.upper() in GGUF_MIXES:
        return EstimatedVariant(format=GGUF_LAYOUT, gguf_type=text.upper())
    names = sorted(known) if known else []
    raise EstimateInputError(
        f"--variant {text!r} is not a known variant {names}, 'auto', an existing .gguf file or "
        f"HF folder, a GGUF type {list(GGUF_MIXES)}, or a format {list(formats)} "
        "(optionally 'gptq:bits=4,group_size=128,sym=true')"
    )


def variants_from_params(
    params: Mapping[str, Any], folder: Path | None
) -> dict[str, EstimatedVariant]:
    """Every ``variants:`` recipe of a params mapping, read from ``folder/<name>`` where built
    (``folder`` None: every one at its nominal bytes, as for a model not prepared here)."""

    return {
        name: variant_from_recipe(
            name, variant_recipe(dict(params), name), folder / name if folder else None
        )
        for name in params.get("variants") or {}
    }


def variant_from_recipe(name: str, recipe: Any, folder: Path | None = None) -> EstimatedVariant:
    """The estimator's view of a params.yaml variant recipe, through its format's module, read
    from its built folder where it exists (real bytes: the .gguf file, or the checkpoint)."""
    fmt = get_format(recipe.format)
    path: Path | None = None
    config = None
    if folder is not None and folder.is_dir():
        # a one-file format's variant (a .gguf) is read from its file, any other from its folder
        files = sorted(folder.glob(f"*{fmt.file_suffix}")) if fmt.file_suffix else []
        path = files[0] if files else folder
        config = maybe_hf_config(folder)
    fields = fmt.estimator_fields(recipe, path, config)
    return EstimatedVariant(name=name, path=path, **fields)
