"""Read a Hugging Face ``config.json`` into a typed architecture summary.

Only dense decoder-only transformers with Llama-style keys are described (Llama, Mistral,
Qwen2/3, Gemma, Phi-3, GPT-NeoX ...). Mixture-of-experts configs are refused rather than
silently mis-counted. The summary lists every weight matrix with its shape, which is what the
byte and FLOP counts are built from, so grouped-query attention, the real intermediate size
and gated MLPs are all taken from the file instead of assumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quantbench.estimate.errors import EstimateInputError, MissingInputError
from quantbench.hfconfig import MissingConfigError, config_path, read_hf_config
from quantbench.schemas.roofline import ModelShape

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
