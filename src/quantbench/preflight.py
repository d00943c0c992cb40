"""Checks that need more than params.yaml itself, run before any work starts.

`load_config` validates the file on its own (types, ranges, names, pairs). These checks also look
at what the params point to and at this machine, so they run where a run begins (`make repro`
calls `quantbench validate`, which calls them, before `dvc repro`; so does the `validate`
stage): the data files read whole by their stages' readers and what they hold, the model folder's
and the adopted adapter's files by their headers (nothing is loaded), the settings that cannot
run together, the memory and disk a run needs, the engines this machine can serve with, each
workload against each context. Each check registers itself with a line saying what it refuses
(`quantbench.checks`): docs/FAULTS.md's "What validate checks" lists them all, generated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from quantbench import accelerator, checks
from quantbench.bench.served_here import not_served_here, unservable_in
from quantbench.config import Config
from quantbench.data import (
    chat_problems,
    check_data_file,
    jsonl_rows,
    outside_project,
    overlap_problem,
    path_problem,
    question_problems,
)
from quantbench.engines.artifact import Artifact
from quantbench.engines.memory import GIB, gpu_shortfall, total_bytes
from quantbench.engines.registry import get_engine, smallest_context, unservable_here
from quantbench.errors import UserError, shown
from quantbench.formats.base import VariantSpecError
from quantbench.formats.gguf import gguf_hparams
from quantbench.formats.gguf_header import read_header as read_gguf
from quantbench.formats.registry import get_format
from quantbench.hfconfig import read_hf_config, text_config
from quantbench.linear_names import linear_layer_names
from quantbench.lora.adopt import adapter_fit_problems
from quantbench.lora.data import load_chats
from quantbench.lora.train import target_problem
from quantbench.model import EMBEDDED_NAME, ModelSourceError, embedded_gguf_path
from quantbench.model_files import local_folder_problems
from quantbench.qa import load_qa
from quantbench.quality.served_task import standard_task_problems
from quantbench.quantize.build import check_calibration_file
from quantbench.safetensors_header import read_header
from quantbench.schemas import io as schema_io
from quantbench.schemas.model_info import BaseModelInfo, MergedModelInfo
from quantbench.schemas.variant import VariantRecord
from quantbench.slo import Slo
from quantbench.workloads.spec import OpenLoop, TracePrompts
from quantbench.workloads.stats import prompt_lengths, words
from quantbench.workloads.traffic import materialize


class PreflightError(UserError):
    """One or more problems found before any work started; the message lists them all."""


@dataclass(frozen=True)
class Widths:
    """The model dimensions the checks need."""

    hidden_size: int
    intermediate_size: int
    max_position_embeddings: int


@functools.cache
def embedded_widths() -> Widths:
    """The embedded model's dimensions from its GGUF metadata (the header only)."""

    found = gguf_hparams(
        embedded_gguf_path(), "embedding_length", "feed_forward_length", "context_length"
    )
    return Widths(
        hidden_size=found["embedding_length"],
        intermediate_size=found["feed_forward_length"],
        max_position_embeddings=found["context_length"],
    )


def folder_widths(folder: Path) -> Widths:
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
    return {name: size.max_output for name, size in workload_sizes(config).items()}


class WorkloadSize(NamedTuple):
    """What one workload's requests ask of a context, before any tokenizer is at hand."""

    max_output: int
    """The most output tokens one request asks for."""
    longest: int
    """The longest request at least: its prompt's words (earlier turns and their answers
    included) plus its answer."""
    longest_prompt: int
    """That request's prompt, in words."""


def workload_sizes(config: Config) -> dict[str, WorkloadSize]:
    """Per workload, what its requests ask of a context (:class:`WorkloadSize`).

    Words bound tokens from below for the tokenizers this project serves (byte-level BPE splits
    at every space, so each word is one token or more): a request this long cannot fit a
    smaller context, whatever the tokenizer; the chat template only adds to it."""

    out = {}
    for name, spec in config.workloads.items():
        traffic = materialize(spec, config.data.corpus)
        longest = (0, 0)
        for conv in traffic.conversations:
            for (prompt, _), turn in zip(prompt_lengths(conv, words), conv.turns, strict=True):
                longest = max(longest, (prompt + turn.max_tokens, prompt))
        asked = max(t.max_tokens for c in traffic.conversations for t in c.turns)
        out[name] = WorkloadSize(asked, *longest)
    return out


@checks.check(
    "contexts",
    "a workload's output length, or its longest request (prompt words, history and answer: a "
    "lower bound in tokens), beyond a bench pair's per-request context or the model's",
)
def context_problems(
    sizes: dict[str, WorkloadSize], contexts: dict[str, tuple[int, str]]
) -> list[str]:
    """Each workload's longest request against each bench pair's per-request context: a
    request that cannot fit would be dropped from the traffic (the workloads stage fits it to
    the smallest context), so the pair would measure another workload than the one named."""
    found = []
    for workload, (_, longest, prompt) in sizes.items():  # (max_output, longest, its prompt)
        for pair, (context, what) in sorted(contexts.items()):
            if longest > context:
                found.append(
                    f"workloads.{workload}: its longest request holds at least {longest} tokens "
                    f"({prompt} of prompt, history included, and its answer) but bench.pairs."
                    f"{pair}'s {what} allows {context} per request; raise that setting, or lower "
                    f"workloads.{workload}.length_scale (or its turns' lengths)"
                )
    return found


def _read_chats(path: Path) -> object:
    return load_chats(path)


def _read_questions(path: Path) -> object:
    return load_qa(path)


# Each data file the stages read, what it is for, and the reader that will read it: the same
# reader reads it whole here, so a bad line is found before any work, with its number.
DATA_FILES: tuple[tuple[str, str, Any], ...] = (
    ("heldout", "held-out questions (finetune, merge, evaluate)", _read_questions),
    ("eval", "evaluation text (evaluate)", None),
)


def _corpus_used(config: Config) -> bool:
    """Whether a workload cuts its prompts from data.corpus: the named ones (``use:``) and a
    trace's; random prompts, datasets and conversation files do not."""

    return any(
        spec.use is not None or isinstance(spec.prompts, TracePrompts)
        for spec in config.workloads.values()
    )


@checks.check(
    "data files",
    "each data file params names missing, a folder, a named pipe or a device, not UTF-8, empty, "
    "or with a line its stage's reader refuses (with the line)",
)
def data_problems(config: Config) -> list[str]:
    """The data files the stages will read: each must exist, be UTF-8 and hold something, and
    a file with a structure must be read whole by the reader its stage uses."""

    wanted = list(DATA_FILES)
    if config.lora.train:
        wanted.insert(0, ("train", "training chats (finetune, with lora.train: true)", _read_chats))
    files = [(key, getattr(config.data, key), what, reader) for key, what, reader in wanted]
    if _corpus_used(config):
        files += [
            (f"corpus.{j}", path, "text the named workloads cut prompts from", None)
            for j, path in enumerate(config.data.corpus)
        ]
    found = []
    for key, where, what, reader in files:
        try:
            path = check_data_file(where, f"data.{key} ({what})")
            if reader is not None:
                reader(path)
        except (UserError, ValueError) as exc:
            text = str(exc)
            found.append(text if text.startswith("data.") else f"data.{key}: {text}")
    return found + content_problems(config, found)


@checks.check(
    "data content",
    "training chats with an empty turn or repeated; held-out questions empty, repeated, "
    "accepting an empty string, or also asked in the training chats (how many lines, which)",
)
def content_problems(config: Config, found: list[str]) -> list[str]:
    """What the training chats and held-out questions hold that parses but is wrong (each
    file's reader has accepted it: ``found`` holds nothing about it)."""

    def readable(key: str) -> bool:
        return not any(f.startswith(f"data.{key}") for f in found)

    out: list[str] = []
    chats = None
    if config.lora.train and readable("train"):
        chats = jsonl_rows(config.data.train)
        out += chat_problems(chats, "data.train", config.data.train)
    if readable("heldout"):
        questions = jsonl_rows(config.data.heldout)
        out += question_problems(questions, "data.heldout", config.data.heldout)
        if chats is not None:
            overlap = overlap_problem(
                questions,
                chats,
                ("data.heldout", "data.train"),
                (config.data.heldout, config.data.train),
            )
            out += [overlap] if overlap else []
    return out


@checks.check(
    "LoRA targets",
    "a lora.target_modules name the model has no linear layer of (its layers built from its "
    "config on torch's meta device)",
)
def lora_problems(config: Config, found: list[str]) -> list[str]:
    """LoRA's target modules against the model's linear layers (read from its config, on the
    meta device: no weights), where the pipeline trains an adapter."""

    if not config.lora.train or any(f.startswith("model") for f in found):
        return []
    try:
        names = linear_layer_names(config.model)
    except (OSError, ValueError, KeyError) as exc:
        return [f"model: cannot read the model's config to check lora.target_modules ({exc})"]
    if names is None:
        return []
    problem = target_problem(names, list(config.lora.target_modules))
    return [problem] if problem else []


# Bits a weight takes at the least in each GGUF file type's name (Q4_K_M: 4; F16: 16): the
# weights of a variant not built yet, from below (scales and the layers kept wider only add).
def _variant_bits(recipe: Any) -> int:
    bits = getattr(recipe, "bits", None)
    if isinstance(bits, int):
        return bits
    gguf_type = getattr(recipe, "type", None)
    if isinstance(gguf_type, str):
        digits = "".join(ch for ch in gguf_type.split("_")[0] if ch.isdigit())
        return int(digits) if digits else 16
    return 8 if recipe.format == "w8a8" else 16


@contextlib.contextmanager
def stand_in_folder(config: Config) -> Iterator[tuple[Path, Path | None]]:
    """A folder holding the model's config.json (a local folder's, or one made from the embedded
    GGUF's metadata), and the embedded GGUF where there is one: what an engine reads of a
    variant to count the cache its settings reserve, before any variant is built."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory(prefix="quantbench-stand-in-") as tmp:
        folder = Path(tmp)
        gguf: Path | None = None
        try:
            if config.model.source == "local" and config.model.path is not None:
                shutil.copyfile(Path(config.model.path) / "config.json", folder / "config.json")
            elif config.model.source == "embedded":
                gguf = embedded_gguf_path()
                h = gguf_hparams(
                    gguf, "block_count", "embedding_length", "attention.head_count",
                    "attention.head_count_kv", "context_length",
                )  # fmt: skip
                (folder / "config.json").write_text(
                    json.dumps({
                        "model_type": "llama", "num_hidden_layers": h["block_count"],
                        "hidden_size": h["embedding_length"],
                        "num_attention_heads": h["attention.head_count"],
                        "num_key_value_heads": h["attention.head_count_kv"],
                        "max_position_embeddings": h["context_length"],
                    })
                )  # fmt: skip
        except (OSError, KeyError, ValueError, UserError):
            pass  # the model's own problem, said by the model checks; caches count nothing
        yield folder, gguf


# The embedded GGUF's tensor names as Hugging Face's Llama names them (its shapes are listed
# columns first: reversed, they are out x in as a safetensors file holds them).
_GGUF_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}  # fmt: skip


def model_tensors(config: Config) -> dict[str, tuple[int, ...]] | None:
    """The model's weights by name with their shapes (out x in), from headers only: a local
    folder's safetensors files, or the embedded GGUF's tensor table in Hugging Face's names;
    None for a hub model not downloaded yet."""
    if config.model.source == "local" and config.model.path is not None:
        out: dict[str, tuple[int, ...]] = {}
        for file in sorted(Path(config.model.path).glob("*.safetensors")):
            out.update({n: t.shape for n, t in read_header(file).tensors.items()})
        return out or None  # pickled weights only: their shapes are not known unloaded
    if config.model.source == "embedded":
        out = {}
        for t in read_gguf(embedded_gguf_path()).tensors:
            parts = t.name.split(".")
            if len(parts) == 4 and parts[0] == "blk" and parts[2] in _GGUF_NAMES:
                name = f"model.layers.{parts[1]}.{_GGUF_NAMES[parts[2]]}.weight"
                out[name] = tuple(reversed(t.shape))
        return out
    return None


def model_name(config: Config) -> str | None:
    """The model's own name, where it is known: the embedded one's, a hub id's, a local folder
    in a hub cache (models--org--name/snapshots/...); None for a folder of any other name."""

    if config.model.source == "embedded":
        return EMBEDDED_NAME
    if config.model.source == "hub" and config.model.hub_id:
        return config.model.hub_id.rsplit("/", 1)[-1]
    if config.model.source == "local" and config.model.path is not None:
        for part in Path(config.model.path).resolve().parts:
            if part.startswith("models--") and part.count("--") >= 2:
                return part.rsplit("--", 1)[-1]
    return None


@checks.check(
    "model folder",
    "model.path not a folder, without config.json (and where one is), without a tokenizer or "
    "a chat template, without weights or a shard its index names; a safetensors file "
    "truncated or padded, or whose shapes and layer count disagree with config.json",
)
def model_problems(config: Config) -> list[str]:
    """A local model folder, by its files' headers (nothing is loaded)."""

    if config.model.source == "local" and config.model.path is not None:
        return local_folder_problems(config.model.path)
    return []


@checks.check(
    "adapter",
    "lora.adapter_path (with lora.train: false) not a LoRA adapter folder, trained on a model "
    "of another name, or whose matrices do not fit the model's modules (a module it lacks, "
    "other widths, a rank other than its config's)",
)
def adapter_problems(config: Config, found: list[str]) -> list[str]:
    """The adopted adapter against the model, from adapter_config.json and the two
    safetensors headers (the adapter's, the model's)."""

    adapter = config.lora.adapter_path
    if config.lora.train or adapter is None:
        return []
    tensors = None
    if not any(f.startswith("model") for f in found):  # a broken model says so already
        try:
            tensors = model_tensors(config)
        except (OSError, ValueError, UserError):
            tensors = None
    return adapter_fit_problems(adapter, tensors, model_name(config))


@checks.check(
    "memory",
    "a bench pair's weights (at least their bits of the model) and what its settings reserve "
    "(vLLM's kv_cache_gb, llama.cpp's context, transformers' continuous-batching blocks), "
    "every sweep point, beyond this machine's memory in all (or a GPU's)",
)
def memory_problems(config: Config, total: int | None = None) -> list[str]:
    """What each bench pair's server holds at the least, every sweep point, against this
    machine's memory in all: its variant's weights (not built yet: the model's parameters at
    the variant's bits, a lower bound) and what its settings reserve, counted by the engine
    itself on a stand-in folder with the model's config (:func:`stand_in_folder`); on a GPU,
    what the engine puts there, against the GPUs found. A setting that can never fit is known
    before any work; the server's own check at start (engines/memory.py) holds the real sizes
    against what is free."""

    total = total_bytes() if total is None else total
    try:
        weights16 = model_weight_bytes(config) or 0
    except (OSError, UserError, KeyError, ValueError):
        weights16 = 0  # the model's own problem, said by the model checks
    found = []
    with stand_in_folder(config) as (folder, gguf):
        for name, pair in config.bench.pairs.items():
            recipe = config.variants.get(pair.variant)
            if recipe is None:
                continue  # an unknown variant is the config's own error
            engine = get_engine(pair.engine)
            stand_in = Artifact(
                pair.variant, recipe.format, folder, gguf if recipe.format == "gguf" else None
            )
            weights = weights16 * _variant_bits(recipe) // 16
            points = config.pair_settings(name).sweep_points()
            over: dict[str, list[str]] = {}  # what is held -> the sweep points that hold it
            for label, point in points:
                gpu = engine.gpu_memory_needs(stand_in, point)
                reserved = [
                    n for n in engine.memory_needs(stand_in, point) if "weights" not in n[1]
                ]
                needs = reserved if gpu is not None else [
                    *([(weights, f"weights of {pair.variant} (at least)")] if weights else []),
                    *reserved,
                ]  # fmt: skip
                if total is not None and sum(n for n, _ in needs) > total:
                    parts = " + ".join(f"{what} = {n / GIB:.2f} GiB" for n, what in needs)
                    over.setdefault(
                        f"{parts}, more than this machine's {total / GIB:.1f} GiB of memory in "
                        "all; lower what the settings reserve (a few GiB hold hundreds of "
                        "thousands of tokens of a small model), or serve a smaller variant",
                        [],
                    ).append(label)
                if gpu is not None:
                    # the engine's own weights on the GPU are a stand-in's here: its reserves
                    kept = tuple(n for n in gpu.needs if "weights" not in n[1])
                    short = gpu_shortfall(
                        dataclasses.replace(gpu, needs=kept), f"engines.{pair.engine}"
                    )
                    if short and kept:
                        over.setdefault(short, []).append(label)
            for why, labels in over.items():
                where = "" if len(labels) == len(points) else f" (sweep points {', '.join(labels)})"
                found.append(f"bench.pairs.{name}{where}: {why}")
    return found


def model_weight_bytes(config: Config) -> int | None:
    """The model's weights at 16 bits a parameter (what the merge and the bf16 variant hold):
    from the embedded GGUF's tensor table, or a local folder's safetensors files as stored; None
    for a hub model not downloaded yet."""

    if config.model.source == "embedded":
        return 2 * sum(math.prod(t.shape) for t in read_gguf(embedded_gguf_path()).tensors)
    if config.model.source == "local" and config.model.path is not None:
        files = list(Path(config.model.path).glob("*.safetensors"))
        return sum(f.stat().st_size for f in files) or None
    return None


# DVC's cache keeps a copy of every output it tracks (its default link type copies where the
# filesystem cannot reflink), beside the workspace's own.
DVC_COPIES = 2
DISK_HEADROOM = 1 << 30  # logs, reports, reference passes, the servers' scratch


def model_outputs(config: Config) -> list[Path]:
    """The folders of the models the run writes (the prepare, merge and quantize stages' outputs
    in dvc.yaml), relative to the project."""
    return [
        Path("models/base"),
        Path("models/merged"),
        *(Path("models/variants") / name for name in config.variants),
    ]


def model_built(config: Config, folder: Path) -> bool:
    """Whether ``folder`` (one of :func:`model_outputs`, in the project) holds the model this
    config builds there: its record (model_info.json, variant.json) readable, naming this
    config's model source or recipe, and its weights files present. An empty folder, a stale
    one of another model or an interrupted copy is not built."""

    try:
        if folder.name == "base" and folder.parent.name == "models":
            info = schema_io.read(folder / "model_info.json", BaseModelInfo)
            source = info.source.model_dump(mode="json")
            model = config.model
            same = source.get("source") == model.source and (
                model.source == "embedded"
                or (model.source == "local" and source.get("path") == str(model.path))
                or (
                    model.source == "hub"
                    and (source.get("hub_id"), source.get("revision"))
                    == (model.hub_id, model.revision)
                )
            )
            return same and all((folder / f).is_file() for f in info.weights_sha256)
        if folder.name == "merged" and folder.parent.name == "models":
            merged = schema_io.read(folder / "model_info.json", MergedModelInfo)
            return bool(merged.weights_sha256) and all(
                (folder / f).is_file() for f in merged.weights_sha256
            )
        record = schema_io.read(folder / "variant.json", VariantRecord, name=folder.name)
        recipe = config.variants.get(folder.name)
        weights = folder / record.weights_file
        return (
            recipe is not None
            and record.recipe == recipe.model_dump(mode="json")
            and weights.is_file()
            and weights.stat().st_size == record.weights_bytes
        )
    except (UserError, OSError, ValueError):
        return False


def disk_needed(config: Config, weights: int, project: Path) -> int:
    """Bytes the run still writes that scale with the model: each model folder in ``project``
    not built yet (:func:`model_built`: the prepared base, the merge, each variant; none bigger
    than the 16-bit weights), in the workspace and in DVC's cache. A folder that holds its
    model is on the disk already: a rerun that changes a report setting asks for the headroom
    only."""
    missing = [p for p in model_outputs(config) if not model_built(config, project / p)]
    return DVC_COPIES * len(missing) * weights + DISK_HEADROOM


@checks.check(
    "disk",
    "less free disk than the run still writes: the base, the merge and each variant not built "
    "yet (a folder counts as built only when it holds that model), each also in DVC's cache",
)
def disk_problems(config: Config, free: int | None = None, where: Path | None = None) -> list[str]:
    """Less free space where the run writes (``where``: the project, the current folder) than
    what it still has to write: found now, not when a quantizer's save fails an hour in (a full
    disk also fails every later write, logs included)."""

    where = Path.cwd() if where is None else where
    try:
        weights = model_weight_bytes(config)
    except (OSError, UserError):
        return []  # the model's own problem, reported by the model checks
    if weights is None:
        return []
    free = shutil.disk_usage(where).free if free is None else free
    needed = disk_needed(config, weights, where)
    if free >= needed:
        return []
    missing = (needed - DISK_HEADROOM) // (DVC_COPIES * weights)
    return [
        f"disk: {free / GIB:.1f} GiB free on {where}, and the run writes up to about "
        f"{needed / GIB:.1f} GiB ({missing} models not built yet, of the base, the merge and "
        f"{len(config.variants)} variants: {weights / GIB:.2f} GiB each at 16 bits, each also in "
        f"DVC's cache; and {DISK_HEADROOM / GIB:.0f} GiB of logs and reports); "
        "free space there (`dvc gc -w` drops cached outputs of older runs) or drop variants"
    ]


@checks.check(
    "settings together",
    "vLLM's max_num_batched_tokens below its model length with chunked prefill off; an SLO or "
    "precision target on tpot or itl where every request asks one output token; an open-loop "
    "point whose measured requests end before its ramp or stay below its max_concurrency; two "
    "variants of one recipe",
)
def combination_problems(
    config: Config, widths: Widths | None, sizes: dict[str, WorkloadSize]
) -> list[str]:
    """Settings each valid alone that cannot run together (``sizes``: each workload's requests,
    :func:`workload_sizes`, for the workloads whose files could be read)."""
    found: list[str] = []
    model_len = widths.max_position_embeddings if widths is not None else None
    for name in config.bench.pairs:
        for label, point in config.pair_settings(name).sweep_points():
            budget = getattr(point, "max_num_batched_tokens", None)
            length = getattr(point, "max_model_len", None) or model_len
            if getattr(point, "enable_chunked_prefill", None) is False and (
                budget is not None and length is not None and budget < length
            ):
                where = "" if label == "default" else f" (sweep point {label})"
                found.append(
                    f"bench.pairs.{name}{where}: max_num_batched_tokens {budget} is below the "
                    f"model length {length} with enable_chunked_prefill: false, and vLLM refuses "
                    "to start so (a prompt must fit one step); raise max_num_batched_tokens to "
                    f"at least {length}, lower max_model_len, or leave chunked prefill on"
                )
    found += [p for name, spec in config.workloads.items() for p in _workload_together(
        name, spec, config.slo, sizes.get(name))]  # fmt: skip
    seen: dict[str, str] = {}
    for name, recipe in config.variants.items():
        key = repr(sorted(recipe.model_dump(mode="json").items()))
        if key in seen:
            found.append(
                f"variants.{name}: the same recipe as variants.{seen[key]} "
                f"({recipe.model_dump(mode='json')}): the same weights would be built and "
                "measured twice under two names; remove one, or change its recipe"
            )
        seen.setdefault(key, name)
    return found


PER_TOKEN = ("tpot", "itl")  # times between output tokens: a one-token answer has none


def _workload_together(
    name: str, spec: Any, default_slo: Slo, size: WorkloadSize | None
) -> list[str]:
    found = []
    where = f"workloads.{name}"
    if size is not None and size.max_output <= 1:
        limits = [c.metric for c in spec.slo_text(default_slo).constraints]
        targets = [m for m, _, _ in spec.precision.parsed()] if spec.precision else []
        for what, metrics in (("SLO", limits), ("precision target", targets)):
            for metric in sorted(set(metrics) & set(PER_TOKEN)):
                found.append(
                    f"{where}: its {what} names {metric}, a time between output tokens, and "
                    "every request asks for one output token: no request has a second, so "
                    f"{metric} is never measured; raise the output length (max_tokens) or drop "
                    f"the {metric} {what.split()[0]}"
                )
    for i, point in enumerate(spec.points):
        if not isinstance(point, OpenLoop):
            continue
        n, seconds = spec.point_size(i)
        label = spec.point_label(i)
        cap = point.max_concurrency
        if cap is not None and n is not None and n < cap:
            found.append(
                f"{where}.load.{i} ({label}): max_concurrency {cap} but {n} measured "
                "requests: the cap is never reached, so the point never measures the load it "
                f"names; set num_requests to at least {cap}, or lower max_concurrency"
            )
        window = seconds if seconds is not None else (n / point.rate if n else None)
        if point.ramp_s and window is not None and window < point.ramp_s:
            found.append(
                f"{where}.load.{i} ({label}): ramp_s {point.ramp_s:g} but its measured requests "
                f"arrive within {window:.3g} s (at {point.rate:g}/s): the point ends before its "
                "ramp does, so it never measures the rate it names; lower ramp_s, or raise "
                f"num_requests (to at least {math.ceil(2 * point.ramp_s * point.rate)}) or "
                "duration_s"
            )
    return found


@checks.check(
    "engines here",
    "a bench pair whose engine cannot serve its format on this machine (a kernel its build "
    "lacks) and that no fallback pair stands in for",
)
def engine_problems(config: Config) -> list[str]:
    """Each bench pair whose engine serves its format in general but not on this machine (a
    kernel missing from the engine's build for this CPU) and that has no fallback pair to stand in
    for it (``fallback_for``): it would fail at its first request."""

    why = unservable_in(config)
    skipped = not_served_here(config.bench.pairs, why)
    found = []
    for name, pair in config.bench.pairs.items():
        if name in skipped or why(name) is None:
            continue
        fmt = config.variants[pair.variant].format
        found.append(
            unservable_here(name, pair.variant, fmt, pair.engine, config.pair_settings(name))
        )
    return [f for f in found if f]


@checks.check(
    "recipes an engine refuses",
    "a bench pair whose engine serves the variant's format but refuses its recipe (vLLM's CPU "
    "build and asymmetric GPTQ)",
)
def recipe_problems(config: Config) -> list[str]:
    """Each enabled bench pair whose engine would refuse its variant's recipe at start."""
    found = []
    for name, pair in config.bench.pairs.items():
        recipe = config.variants.get(pair.variant)
        if recipe is None or not config.engine(pair.engine).enabled:
            continue
        why = get_engine(pair.engine).refuses_recipe(recipe, config.pair_settings(name))
        if why is not None:
            found.append(f"bench.pairs.{name}: variant {pair.variant!r}: {why}")
    return found


def engine_contexts(config: Config) -> dict[str, tuple[int, str]]:
    """Per bench pair: the smallest per-request context over its settings' sweep."""

    contexts: dict[str, tuple[int, str]] = {}
    for name, pair in config.bench.pairs.items():
        limit = smallest_context(pair.engine, config.pair_settings(name))
        if limit is not None:
            contexts[name] = limit
    return contexts


@checks.check(
    "served task",
    "a standard lm-eval task unknown, or whose data is not on this machine",
)
def served_task_problems(config: Config) -> list[str]:
    """Standard lm-eval tasks that are unknown or whose data is not on this machine (the run
    reaches no hub): refused now rather than after hours of benchmarks."""
    served = config.served_task
    if not (served.enabled and served.standard_tasks):
        return []

    return standard_task_problems(served.standard_tasks)


@checks.check(
    "device",
    "runtime.device or an engine's device cuda on a machine without an NVIDIA GPU",
)
def device_problems(config: Config) -> list[str]:
    """A device asked for that this machine does not have (runtime.device, an engine's own)."""

    found = accelerator.detect()
    if found.has_gpu:
        return []
    asked = [("runtime.device", config.runtime.device)]
    for name, settings in config.engines.items():
        if getattr(settings, "enabled", False) and isinstance(
            getattr(settings, "device", None), str
        ):
            asked.append((f"engines.{name}.device", settings.device))
    return [
        f"{key}: {value!r}, but this machine has {found.describe()}; set it to auto (the GPU "
        "where one is found, else the CPU) or cpu, or run on a machine whose NVIDIA driver "
        "answers nvidia-smi"
        for key, value in asked
        if value == "cuda" or value.startswith("cuda:")
    ]


@checks.check(
    "variants",
    "a group size that does not divide the model's widths (from its config or the embedded "
    "GGUF's metadata); a calibration file a calibrating format needs, missing or empty",
)
def variant_problems(config: Config, widths: Widths | None) -> list[str]:
    found = []
    for name, spec in config.variants.items():
        try:
            check_calibration_file(name, spec, config.data.calibration)
            if widths is not None:
                get_format(spec.format).validate_against_model(name, spec, widths)
        except VariantSpecError as exc:
            found.append(str(exc))
    return found


@checks.check(
    "workload files",
    "a workload's prompts, conversations or trace file: missing, a folder or a pipe, or a line "
    "its reader refuses (with the line)",
)
def workload_problems(config: Config) -> tuple[list[str], dict[str, WorkloadSize]]:
    """Each workload's traffic made as its stage makes it (its file read whole), and what its
    requests ask of a context; the problems of those that cannot be made."""

    found: list[str] = []
    sizes: dict[str, WorkloadSize] = {}
    for name, spec in config.workloads.items():
        path = getattr(spec.prompts, "path", None)
        key = f"workloads.{name}.prompts.path"
        if path is not None:
            problem = path_problem(path, key)
            if problem:
                found.append(problem)
                continue
        try:
            sizes[name] = workload_sizes(config.model_copy(update={"workloads": {name: spec}}))[
                name
            ]
        except (OSError, ValueError, UserError) as exc:
            where = f"{key}: {shown(path)}" if path else f"workloads.{name}"
            found.append(f"{where}: {exc}")
    return found, sizes


@checks.check(
    "outside the project",
    "noted, not refused: a data or workload file outside the project (another clone of the "
    "repository lacks it, so the run cannot be reproduced from it)",
)
def notes(config: Config, project: Path | None = None) -> list[str]:
    """What validate says without refusing: each data and workload file outside ``project``
    (the current folder, where relative paths start). A file kept elsewhere on purpose (a
    shared dataset) is the user's call; the note says what it costs."""

    project = Path.cwd() if project is None else project
    paths = [(f"data.{key}", getattr(config.data, key)) for key in ("train", "heldout",
             "calibration", "eval")]  # fmt: skip
    paths += [(f"data.corpus.{j}", p) for j, p in enumerate(config.data.corpus)]
    paths += [
        (f"workloads.{name}.prompts.path", spec.prompts.path)
        for name, spec in config.workloads.items()
        if getattr(spec.prompts, "path", None) is not None
    ]
    return [n for key, path in paths if (n := outside_project(path, key, project))]


def problems(config: Config) -> list[str]:
    """Every problem found, each naming the key, the value and the fix (each function called
    here is a registered check: docs/FAULTS.md lists them)."""

    found: list[str] = device_problems(config) + data_problems(config)
    found += model_problems(config)
    found += adapter_problems(config, found)
    found += lora_problems(config, found)
    widths: Widths | None = None
    if not any(f.startswith("model") for f in found):  # a broken folder says so already
        try:
            widths = model_widths(config)
        except (OSError, KeyError, ValueError, TypeError, ModelSourceError, UserError) as exc:
            found.append(f"model: cannot read the model's dimensions ({exc})")
    found += variant_problems(config, widths)
    workload_found, sizes = workload_problems(config)
    found += workload_found
    asked = max((size.max_output for size in sizes.values()), default=0)
    found += combination_problems(config, widths, sizes)
    found += memory_problems(config)
    found += disk_problems(config)
    found += engine_problems(config)
    found += recipe_problems(config)
    found += served_task_problems(config)
    contexts = dict(engine_contexts(config))
    limits = dict(contexts)
    if widths is not None:
        limits["model"] = (widths.max_position_embeddings, "the model's max_position_embeddings")
    answer_too_long = False
    for _, (context, what) in sorted(limits.items()):
        if asked >= context:
            answer_too_long = True
            found.append(
                f"workloads: requests ask for up to {asked} output tokens (the workloads' "
                f"output lengths) but {what} allows "
                f"{context} tokens per request (prompt included); lower the workload's max_tokens "
                "or raise the context"
            )
    if not answer_too_long:  # (an answer alone too long already says it all)
        found += context_problems(sizes, contexts)
    return found


def check(config: Config) -> None:
    """Raise PreflightError listing every problem, or return quietly."""
    found = problems(config)
    if found:
        raise PreflightError("preflight checks failed:\n  " + "\n  ".join(found))


def describe(config: Config) -> dict[str, Any]:
    """What the checks looked at, for `quantbench validate`."""

    widths = model_widths(config)
    device = accelerator.resolve_device(config.runtime.device)
    return {
        "device": f"{device}: {accelerator.detect().describe()}",
        "model_widths": None if widths is None else widths.__dict__,
        "max_output_tokens": max_output_tokens(config),
        "engine_contexts": {k: v[0] for k, v in engine_contexts(config).items()},
    }
