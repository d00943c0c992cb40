"""Read a Hugging Face ``config.json`` into a typed architecture summary.

Only dense decoder-only transformers with Llama-style keys are described (Llama, Mistral,
Qwen2/3, Gemma, Phi-3, GPT-NeoX ...). Mixture-of-experts configs are refused rather than
silently mis-counted. The summary lists every weight matrix with its shape, which is what the
byte and FLOP counts are built from, so grouped-query attention, the real intermediate size
and gated MLPs are all taken from the file instead of assumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from quantbench.estimate.errors import EstimateInputError, MissingInputError
from quantbench.hfconfig import MissingConfigError, config_path, read_hf_config

# Model types whose MLP is gated (gate_proj and up_proj, then down_proj: three matrices).
GATED_MLP_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi3",
        "granite",
        "olmo",
        "olmo2",
        "smollm3",
        "cohere",
        "internlm2",
        "exaone",
    }
)
# Model types whose MLP is a plain up/down pair (two matrices).
PLAIN_MLP_MODEL_TYPES = frozenset({"gpt_neox", "starcoder2", "phi"})
# Model types whose config class defaults ``tie_word_embeddings`` to True when the key is
# absent; for the others in the lists above the transformers default is False.
TIED_BY_DEFAULT_MODEL_TYPES = frozenset({"gemma", "gemma2", "gemma3_text"})
# Keys whose presence marks a mixture-of-experts model, which this estimator does not cover.
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")

TensorRole = Literal[
    "token_embd",
    "output",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
]


class WeightTensor(BaseModel):
    """One weight matrix, named by its role (GGUF vocabulary) and shaped (rows, cols).

    ``cols`` is the input dimension (the contiguous one, GGUF ``ne[0]``), which is what block
    quantisation groups run along.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: TensorRole
    layer: int | None = Field(description="decoder layer index; None for embedding and head")
    rows: int = Field(gt=0, description="output features")
    cols: int = Field(gt=0, description="input features (block-quantisation axis)")

    @property
    def elements(self) -> int:
        return self.rows * self.cols


class ModelShape(BaseModel):
    """The architecture facts that set FLOPs and bytes, read from ``config.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_type: str
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool
    gated_mlp: bool
    max_position_embeddings: int | None = None
    dtype: str = Field(default="bfloat16", description="torch dtype the checkpoint is stored in")
    quantization_config: dict[str, Any] | None = Field(
        default=None, description="the config's quantization_config, when it has one"
    )
    notes: tuple[str, ...] = Field(default=(), description="defaults filled in while reading")

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_tensors(self, layer: int) -> list[WeightTensor]:
        """The weight matrices of one decoder layer."""
        h, inter = self.hidden_size, self.intermediate_size
        tensors = [
            WeightTensor(role="attn_q", layer=layer, rows=self.q_dim, cols=h),
            WeightTensor(role="attn_k", layer=layer, rows=self.kv_dim, cols=h),
            WeightTensor(role="attn_v", layer=layer, rows=self.kv_dim, cols=h),
            WeightTensor(role="attn_output", layer=layer, rows=h, cols=self.q_dim),
            WeightTensor(role="ffn_up", layer=layer, rows=inter, cols=h),
            WeightTensor(role="ffn_down", layer=layer, rows=h, cols=inter),
        ]
        if self.gated_mlp:
            tensors.insert(4, WeightTensor(role="ffn_gate", layer=layer, rows=inter, cols=h))
        return tensors

    def weight_tensors(self) -> list[WeightTensor]:
        """Every weight matrix: embedding, all layers, and the head unless it is tied."""
        tensors = [
            WeightTensor(role="token_embd", layer=None, rows=self.vocab_size, cols=self.hidden_size)
        ]
        for layer in range(self.num_layers):
            tensors.extend(self.layer_tensors(layer))
        if not self.tie_word_embeddings:
            tensors.append(
                WeightTensor(role="output", layer=None, rows=self.vocab_size, cols=self.hidden_size)
            )
        return tensors

    def streamed_shape_shares(self) -> dict[tuple[int, int], float]:
        """Share of the weights a step streams, by matrix shape (rows, cols).

        Matrix-vector kernels stream small or short-rowed matrices more slowly on some
        machines; this lets a rate measured per shape be weighted by what the model reads.
        """
        counts: dict[tuple[int, int], float] = {}
        for tensor in self.weight_tensors():
            if tensor.role == "token_embd" and not self.tie_word_embeddings:
                continue  # gathered row by row, not streamed
            shape = (tensor.rows, tensor.cols)
            counts[shape] = counts.get(shape, 0.0) + tensor.elements
        total = sum(counts.values())
        return {shape: n / total for shape, n in sorted(counts.items())}

    @property
    def layer_matmul_params(self) -> int:
        """Weights multiplied per token in one decoder layer (attention + MLP projections)."""
        return sum(t.elements for t in self.layer_tensors(0))

    @property
    def body_matmul_params(self) -> int:
        """Weights multiplied per token in all decoder layers."""
        return self.num_layers * self.layer_matmul_params

    @property
    def head_params(self) -> int:
        """Weights of the output projection (the embedding matrix itself when tied)."""
        return self.vocab_size * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def norm_params(self) -> int:
        """RMSNorm/LayerNorm weights: two per layer plus the final one (biases ignored)."""
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def total_params(self) -> int:
        """Parameter count as a checkpoint stores it (tied head counted once)."""
        head = 0 if self.tie_word_embeddings else self.head_params
        return self.embedding_params + self.body_matmul_params + head + self.norm_params

    @property
    def kv_elements_per_token(self) -> int:
        """K and V elements cached per token across all layers (grouped-query aware)."""
        return 2 * self.num_layers * self.kv_dim


def _first(config: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _require_int(config: dict[str, Any], source: str, *keys: str) -> int:
    value = _first(config, *keys)
    if value is None:
        raise EstimateInputError(
            f"{source}: none of the keys {list(keys)} is set; cannot size the model"
        )
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise EstimateInputError(f"{source}: {keys[0]}={value!r} must be a positive integer")
    return value


def architecture_from_config(
    config: dict[str, Any], source: str = "config.json", gated_mlp: bool | None = None
) -> ModelShape:
    """Build a :class:`ModelShape` from a parsed HF config dict.

    ``gated_mlp`` overrides the model-type table for model types it does not know.
    """
    if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
        config = {**config["text_config"], "quantization_config": config.get("quantization_config")}
    moe = [k for k in MOE_KEYS if config.get(k)]
    if moe:
        raise EstimateInputError(
            f"{source}: mixture-of-experts keys {moe} found; only dense models are estimated"
        )
    model_type = str(config.get("model_type", "unknown"))
    notes: list[str] = []
    hidden = _require_int(config, source, "hidden_size", "n_embd", "d_model")
    heads = _require_int(config, source, "num_attention_heads", "n_head")
    layers = _require_int(config, source, "num_hidden_layers", "n_layer")
    inter = _require_int(config, source, "intermediate_size", "n_inner", "ffn_dim")
    vocab = _require_int(config, source, "vocab_size")

    kv_heads = _first(config, "num_key_value_heads", "num_kv_heads")
    if kv_heads is None:
        kv_heads = heads
        notes.append("num_key_value_heads absent: multi-head attention assumed")
    head_dim = config.get("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise EstimateInputError(
                f"{source}: head_dim absent and hidden_size={hidden} is not divisible by "
                f"num_attention_heads={heads}"
            )
        head_dim = hidden // heads
        notes.append("head_dim absent: hidden_size / num_attention_heads used")
    if heads % kv_heads:
        raise EstimateInputError(
            f"{source}: num_attention_heads={heads} is not a multiple of "
            f"num_key_value_heads={kv_heads}"
        )

    if gated_mlp is None:
        if model_type in GATED_MLP_MODEL_TYPES:
            gated_mlp = True
        elif model_type in PLAIN_MLP_MODEL_TYPES:
            gated_mlp = False
        else:
            raise EstimateInputError(
                f"{source}: model_type {model_type!r} is not in the known gated "
                f"({sorted(GATED_MLP_MODEL_TYPES)}) or plain ({sorted(PLAIN_MLP_MODEL_TYPES)}) "
                "MLP lists; pass gated_mlp explicitly"
            )

    tie = config.get("tie_word_embeddings")
    if tie is None:
        tie = model_type in TIED_BY_DEFAULT_MODEL_TYPES
        notes.append(f"tie_word_embeddings absent: {tie} (the {model_type} default) assumed")

    dtype = _first(config, "torch_dtype", "dtype") or "bfloat16"
    return ModelShape(
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=inter,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        vocab_size=vocab,
        tie_word_embeddings=bool(tie),
        gated_mlp=gated_mlp,
        max_position_embeddings=config.get("max_position_embeddings"),
        dtype=str(dtype),
        quantization_config=config.get("quantization_config"),
        notes=tuple(notes),
    )


def read_architecture(path: Path | str, gated_mlp: bool | None = None) -> ModelShape:
    """Read ``config.json`` (or a folder holding one) into a :class:`ModelShape`."""
    try:
        config = read_hf_config(path)
    except MissingConfigError as exc:
        raise MissingInputError(str(exc)) from None
    return architecture_from_config(config, source=str(config_path(path)), gated_mlp=gated_mlp)
