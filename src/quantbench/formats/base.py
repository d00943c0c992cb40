"""The format contract: what a variant format is, from recipe to serving, in one place.

A format is one module under ``quantbench/formats/`` (or a plugin's, see docs/EXTENDING.md) that
defines a :class:`Format` subclass and registers it. The class holds what every stage needs:

* ``recipe_model``: its recipe under ``variants:`` in params.yaml (a :class:`Recipe` whose
  ``format`` field is a literal of its name);
* ``build``: the quantizer (heavy libraries imported inside it);
* ``needs_calibration`` and ``validate_against_model``: the checks that run before any work;
* ``matches``: whether a checkpoint on disk is of this format (one detector for everyone);
* ``file_suffix``: where a variant is one file (a ``.gguf``) rather than a folder;
* ``quality_backend``: which backend of the quality harness reads it (a name registered in
  ``quantbench.quality.backends``: ``hf``, ``gguf``, or a plugin's);
* ``estimator_fields``: how the roofline estimator counts its bytes, as plain fields of its
  variant model (a format that does not say is refused by the estimator, never silently costed as
  bf16). Plain data, so a format module never imports the estimator.

Which engines serve a format is theirs to say (``Engine.formats``): a format names no engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from quantbench.errors import UserError
from quantbench.settings import Settings

if TYPE_CHECKING:
    from quantbench.formats.build import BuildRequest, BuildResult


class VariantSpecError(UserError, ValueError):
    """A variant's recipe cannot work (bad value, or it does not fit the model)."""


class Recipe(Settings):
    """Base for every format's recipe: unknown keys are errors, values are immutable."""

    format: str


class CalibrationSpec(Settings):
    """How much of the calibration text a calibrating quantizer sees."""

    samples: int | None = Field(
        None,
        ge=1,
        description="Use the first N passages of the calibration file (split at blank lines); "
        "null uses all of them. File order, no shuffling, so runs repeat exactly.",
    )
    max_tokens: int = Field(
        512,
        ge=16,
        le=32768,
        description="Token limit per calibration passage (longer ones are cut).",
    )


def check_group_size(value: int) -> int:
    if value == -1 or (value >= 16 and value & (value - 1) == 0):
        return value
    raise ValueError(
        f"group_size must be -1 or a power of two >= 16 (32, 64, 128, ...), got {value}"
    )


def validate_name(name: str) -> str:
    """Variant names become folder and DVC stage names: keep them to a safe alphabet."""
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", name):
        raise VariantSpecError(
            f"variant name {name!r}: use 1-64 lowercase letters, digits, '.', '_' or '-' "
            "(it names a folder and a DVC stage)"
        )
    return name


def quantized_widths(arch: Any) -> dict[str, int]:
    """Input widths of the linear layers a weight-only quantizer groups along."""
    return {"hidden_size": int(arch.hidden_size), "intermediate_size": int(arch.intermediate_size)}


def divisors_hint(widths: dict[str, int], group_size: int) -> str:
    """Group sizes that would work for these widths, to put in the error message."""
    options = [g for g in (16, 32, 64, 128, 256) if all(w % g == 0 for w in widths.values())]
    shown = ", ".join(str(g) for g in options) if options else "none of 16..256"
    return f"allowed here: -1, {shown}"


def check_group_size_fits(name: str, spec: Any, arch: Any) -> None:
    """Checks that need the model: a group size must divide every grouped layer width.

    `arch` is anything with `hidden_size` and `intermediate_size` (quantbench.model.Architecture
    or a transformers config).
    """
    group_size = getattr(spec, "group_size", None)
    if group_size is None or group_size == -1:
        return
    widths = quantized_widths(arch)
    bad = {key: width for key, width in widths.items() if width % group_size}
    if bad:
        shown = ", ".join(f"{key}={width}" for key, width in bad.items())
        raise VariantSpecError(
            f"variant {name!r}: variants.{name}.group_size={group_size} does not divide the "
            f"model's {shown}; {divisors_hint(widths, group_size)}"
        )


class Format(ABC):
    """One variant format (see the module docstring for what each member is for)."""

    name: ClassVar[str]
    recipe_model: ClassVar[type[Recipe]]
    quality_backend: ClassVar[str] = "hf"
    file_suffix: ClassVar[str | None] = None
    """A variant of it is one file with this suffix (GGUF's ``.gguf``), alone in its folder or
    given by itself: what engines are handed (``Artifact.weights``) and the estimator reads;
    None: the variant is its folder (an HF checkpoint, read by its config.json)."""
    code_files: ClassVar[tuple[str, ...]] = ()
    """Files besides its module that its code runs or reads (a plugin's server script, its
    requirements): in its code stamp (quantbench.code_stamps), so editing one reruns its stages."""
    libraries: ClassVar[tuple[str, ...]] = ()
    """Installed distributions that shape this format's output (their versions are recorded in
    variant.json)."""

    @abstractmethod
    def build(self, request: BuildRequest) -> BuildResult:
        """Write the variant into ``request.out_dir``; return its main weights file."""

    def needs_calibration(self, recipe: Recipe) -> bool:
        return False

    def load_hf_model(self, model_dir: Path, dtype: Any) -> Any:
        """The checkpoint as a transformers causal LM, for the quality harness's ``hf`` backend
        (a format whose checkpoint transformers cannot load alone overrides this)."""
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)

    def validate_against_model(self, name: str, recipe: Recipe, arch: Any) -> None:
        """Checks that need the model's widths (``arch`` has hidden_size, intermediate_size)."""
        check_group_size_fits(name, recipe, arch)

    @abstractmethod
    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        """Whether the checkpoint in ``folder`` (its config.json as ``config``, None where it
        has none) is of this format."""

    def estimator_fields(
        self, recipe: Recipe | None, path: Path | None, config: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The estimator's view of this variant (fields of quantbench.estimate.spec's
        EstimatedVariant: format, bits, group_size, sym, gguf_type), from the recipe where there
        is one, else from the checkpoint (``path``, its ``config``)."""
        raise VariantSpecError(
            f"format {self.name!r} does not tell the estimator how its weights are stored "
            f"(Format.estimator_fields is not implemented in {type(self).__module__})"
        )
