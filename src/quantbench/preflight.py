"""Checks that need more than params.yaml itself, run before any work starts.

`load_config` validates the file on its own (types, ranges, names, pairs). These checks also look
at what the params point to, so they run where a run begins (`make repro` calls
`quantbench validate`, which calls them, before `dvc repro`; the `prepare` stage calls them too):

- a local model folder or an adapter folder that does not exist;
- a group size that does not divide the model's layer widths (read from the model's config, or
  from the embedded GGUF's metadata, without loading any weights);
- a workload whose requests ask for more output tokens than an engine's context can hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantbench.config import Config
from quantbench.errors import UserError


class PreflightError(UserError):
    """One or more problems found before any work started; the message lists them all."""


@dataclass(frozen=True)
class Widths:
    """The model dimensions the checks need."""

    hidden_size: int
    intermediate_size: int
    max_position_embeddings: int


def embedded_widths() -> Widths:
    """The embedded model's dimensions from its GGUF metadata (no weights are read)."""
    from quantbench.formats.gguf import gguf_hparams
    from quantbench.model import embedded_gguf_path

    found = gguf_hparams(
        embedded_gguf_path(), "embedding_length", "feed_forward_length", "context_length"
    )
    return Widths(
        hidden_size=found["embedding_length"],
        intermediate_size=found["feed_forward_length"],
        max_position_embeddings=found["context_length"],
    )


def folder_widths(folder: Path) -> Widths:
    from quantbench.hfconfig import read_hf_config, text_config

    config = text_config(read_hf_config(folder))
    return Widths(
        hidden_size=int(config["hidden_size"]),
        intermediate_size=int(config["intermediate_size"]),
        max_position_embeddings=int(config.get("max_position_embeddings", 1 << 30)),
    )


def model_widths(config: Config) -> Widths | None:
    """None where the model is not on this machine yet (a hub id before its download)."""
    if config.model.source == "embedded":
        return embedded_widths()
    if config.model.source == "local" and config.model.path is not None:
        return folder_widths(config.model.path)
    return None


def max_output_tokens(config: Config) -> int:
    """The most output tokens any request of any workload asks for (reading every file a
    workload names the way the workloads stage will: a bad line is an error naming it)."""
    return max(workload_outputs(config).values(), default=0)


def workload_outputs(config: Config) -> dict[str, int]:
    """Per workload, the most output tokens one of its requests asks for."""
    from quantbench.workloads.traffic import materialize

    out = {}
    for name, spec in config.workloads.items():
        traffic = materialize(spec, config.data.corpus)
        out[name] = max(t.max_tokens for c in traffic.conversations for t in c.turns)
    return out


DATA_FILES = (
    ("heldout", "held-out questions (finetune, merge, evaluate)"),
    ("eval", "evaluation text (evaluate)"),
)


def data_problems(config: Config) -> list[str]:
    """The data files the stages will read: each must exist and hold something."""
    from quantbench.data import DataFileError, check_data_file

    wanted = list(DATA_FILES)
    if config.lora.train:
        wanted.insert(0, ("train", "training chats (finetune, with lora.train: true)"))
    found = []
    for key, what in wanted:
        try:
            check_data_file(getattr(config.data, key), f"data.{key} ({what})")
        except DataFileError as exc:
            found.append(str(exc))
    return found


def engine_contexts(config: Config) -> dict[str, tuple[int, str]]:
    """Per bench pair: the smallest per-request context over its settings' sweep."""
    from quantbench.engines.registry import smallest_context

    contexts: dict[str, tuple[int, str]] = {}
    for name, pair in config.bench.pairs.items():
        limit = smallest_context(pair.engine, config.pair_settings(name))
        if limit is not None:
            contexts[name] = limit
    return contexts


def problems(config: Config) -> list[str]:
    """Every problem found, each naming the key, the value and the fix."""
    from quantbench.formats.base import VariantSpecError
    from quantbench.formats.registry import get_format
    from quantbench.model import ModelSourceError, check_local_folder
    from quantbench.quantize.build import check_calibration_file

    found: list[str] = data_problems(config)
    if config.model.source == "local" and config.model.path is not None:
        try:
            check_local_folder(config.model.path)
        except ModelSourceError as exc:
            found.append(str(exc))
    if not config.lora.train and config.lora.adapter_path is not None:
        adapter = config.lora.adapter_path
        if not (adapter / "adapter_config.json").is_file():
            found.append(
                f"lora.adapter_path: {adapter} is not a peft adapter folder (no "
                "adapter_config.json); give the adapter's folder or set lora.train: true"
            )
    widths: Widths | None = None
    try:
        widths = model_widths(config)
    except (OSError, KeyError, ValueError, ModelSourceError) as exc:
        if not any(f.startswith("model.path") for f in found):  # that already explains it
            found.append(f"model: cannot read the model's dimensions ({exc})")
    for name, spec in config.variants.items():
        try:
            check_calibration_file(name, spec, config.data.calibration)
            if widths is not None:
                get_format(spec.format).validate_against_model(name, spec, widths)
        except VariantSpecError as exc:
            found.append(str(exc))
    asked = 0
    for name, spec in config.workloads.items():
        try:
            asked = max(
                asked, workload_outputs(config.model_copy(update={"workloads": {name: spec}}))[name]
            )
        except (OSError, ValueError, UserError) as exc:
            path = getattr(spec.prompts, "path", None)
            where = f"workloads.{name}.prompts.path: {path}" if path else f"workloads.{name}"
            found.append(f"{where}: {exc}")
    limits = dict(engine_contexts(config))
    if widths is not None:
        limits["model"] = (widths.max_position_embeddings, "the model's max_position_embeddings")
    for _, (context, what) in sorted(limits.items()):
        if asked >= context:
            found.append(
                f"workloads: requests ask for up to {asked} output tokens (the workloads' "
                f"output lengths) but {what} allows "
                f"{context} tokens per request (prompt included); lower the workload's max_tokens "
                "or raise the context"
            )
    return found


def check(config: Config) -> None:
    """Raise PreflightError listing every problem, or return quietly."""
    found = problems(config)
    if found:
        raise PreflightError("preflight checks failed:\n  " + "\n  ".join(found))


def describe(config: Config) -> dict[str, Any]:
    """What the checks looked at, for `quantbench validate`."""
    widths = model_widths(config)
    return {
        "model_widths": None if widths is None else widths.__dict__,
        "max_output_tokens": max_output_tokens(config),
        "engine_contexts": {k: v[0] for k, v in engine_contexts(config).items()},
    }
