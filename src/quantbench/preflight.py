"""Checks that need more than params.yaml itself, run before any work starts.

`load_config` validates the file on its own (types, ranges, names, pairs). These checks also look
at what the params point to, so they run where a run begins (`make repro` calls
`quantbench validate`, which calls them, before `dvc repro`; the `prepare` stage calls them too):

- a data file that is not UTF-8, or a line of the training chats or held-out questions that their
  reader refuses (read whole, by the reader its stage uses);
- a local model folder or an adapter folder that does not exist;
- a LoRA target module the model does not have (its linear layers, from its config alone);
- an engine setting that reserves more memory than the machine has in all (vLLM's KV cache);
- less free disk than the run's models take (the merge and every variant, each also copied into
  DVC's cache);
- a pair whose engine cannot serve its format on this machine (vLLM's build for a CPU without
  AVX-512 has no 4-bit weight kernel: GPTQ and AWQ);
- a group size that does not divide the model's layer widths (read from the model's config, or
  from the embedded GGUF's metadata, without loading any weights);
- a workload whose requests ask for more output tokens than an engine's context can hold, or
  whose longest request (prompt words, history and answer: a lower bound in tokens) cannot fit
  a bench pair's per-request context.
"""

from __future__ import annotations

import functools
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from quantbench.bench.served_here import Unservable, not_served_here
from quantbench.config import Config
from quantbench.engines.registry import get_engine
from quantbench.errors import UserError


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
    from quantbench.workloads.stats import prompt_lengths, words
    from quantbench.workloads.traffic import materialize

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
    from quantbench.lora.data import load_chats

    return load_chats(path)


def _read_questions(path: Path) -> object:
    from quantbench.qa import load_qa

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
    from quantbench.workloads.spec import TracePrompts

    return any(
        spec.use is not None or isinstance(spec.prompts, TracePrompts)
        for spec in config.workloads.values()
    )


def data_problems(config: Config) -> list[str]:
    """The data files the stages will read: each must exist, be UTF-8 and hold something, and
    a file with a structure must be read whole by the reader its stage uses."""
    from quantbench.data import check_data_file

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
    return found


def lora_problems(config: Config, found: list[str]) -> list[str]:
    """LoRA's target modules against the model's linear layers (read from its config, on the
    meta device: no weights), where the pipeline trains an adapter."""
    from quantbench.linear_names import linear_layer_names
    from quantbench.lora.train import target_problem

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


def memory_problems(config: Config, total: int | None = None) -> list[str]:
    """What each bench pair's engine reserves whatever the model (vLLM's KV-cache space on a CPU;
    every sweep point) against this machine's memory in all: a setting that can never fit is
    known before any work. The weights are not built yet and count nothing here; the server's
    own check at start (engines/memory.py) adds them and holds the sum against what is free."""
    from quantbench.engines.artifact import Artifact
    from quantbench.engines.memory import GIB, total_bytes
    from quantbench.engines.registry import get_engine

    total = total_bytes() if total is None else total
    if total is None:
        return []
    found = []
    for name, pair in config.bench.pairs.items():
        recipe = config.variants.get(pair.variant)
        if recipe is None:
            continue  # an unknown variant is the config's own error
        engine = get_engine(pair.engine)
        stand_in = Artifact(pair.variant, recipe.format, Path("/nonexistent") / pair.variant)
        points = config.pair_settings(name).sweep_points()
        over: dict[str, list[str]] = {}  # what is reserved -> the sweep points that reserve it
        for label, point in points:
            needs = [n for n in engine.memory_needs(stand_in, point) if n[1] != "weights"]
            if sum(n for n, _ in needs) > total:
                parts = " + ".join(f"{what} = {n / GIB:.2f} GiB" for n, what in needs)
                over.setdefault(parts, []).append(label)
        for parts, labels in over.items():
            where = "" if len(labels) == len(points) else f" (sweep points {', '.join(labels)})"
            found.append(
                f"bench.pairs.{name}{where}: {parts} reserved, more than this machine's "
                f"{total / GIB:.1f} GiB of memory in all; lower it (a few GiB hold hundreds "
                "of thousands of tokens of a small model)"
            )
    return found


def model_weight_bytes(config: Config) -> int | None:
    """The model's weights at 16 bits a parameter (what the merge and the bf16 variant hold):
    from the embedded GGUF's tensor table, or a local folder's safetensors files as stored; None
    for a hub model not downloaded yet."""
    from quantbench.model import embedded_gguf_path

    if config.model.source == "embedded":
        from quantbench.formats.gguf_header import read_header

        return 2 * sum(math.prod(t.shape) for t in read_header(embedded_gguf_path()).tensors)
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


def disk_needed(config: Config, weights: int, project: Path) -> int:
    """Bytes the run still writes that scale with the model: each model folder not in
    ``project`` yet (the prepared base, the merge, each variant: none bigger than the 16-bit
    weights), in the workspace and in DVC's cache. A folder already there is on the disk
    already: a rerun that changes a report setting asks for the headroom only."""
    missing = [p for p in model_outputs(config) if not (project / p).exists()]
    return DVC_COPIES * len(missing) * weights + DISK_HEADROOM


def disk_problems(config: Config, free: int | None = None, where: Path | None = None) -> list[str]:
    """Less free space where the run writes (``where``: the project, the current folder) than
    what it still has to write: found now, not when a quantizer's save fails an hour in (a full
    disk also fails every later write, logs included)."""
    from quantbench.engines.memory import GIB

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


def unservable_in_config(config: Config) -> Unservable:
    """Why each bench pair's engine cannot serve its variant on this machine (None: it can), from
    the validated config (the stages ask the same of raw params: served_here.unservable_in)."""

    def why(name: str) -> str | None:
        pair = config.bench.pairs[name]
        recipe = config.variants.get(pair.variant)
        # an unknown variant is the config's own error; a disabled engine runs nothing
        if recipe is None or not config.engine(pair.engine).enabled:
            return None
        engine = get_engine(pair.engine)
        return engine.unservable_here(recipe.format, config.pair_settings(name))

    return why


def engine_problems(config: Config) -> list[str]:
    """Each bench pair whose engine serves its format in general but not on this machine (a
    kernel missing from the engine's build for this CPU) and that has no fallback pair to stand in
    for it (``fallback_for``): it would fail at its first request."""
    from quantbench.engines.registry import unservable_here

    why = unservable_in_config(config)
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


def engine_contexts(config: Config) -> dict[str, tuple[int, str]]:
    """Per bench pair: the smallest per-request context over its settings' sweep."""
    from quantbench.engines.registry import smallest_context

    contexts: dict[str, tuple[int, str]] = {}
    for name, pair in config.bench.pairs.items():
        limit = smallest_context(pair.engine, config.pair_settings(name))
        if limit is not None:
            contexts[name] = limit
    return contexts


def served_task_problems(config: Config) -> list[str]:
    """Standard lm-eval tasks that are unknown or whose data is not on this machine (the run
    reaches no hub): refused now rather than after hours of benchmarks."""
    served = config.served_task
    if not (served.enabled and served.standard_tasks):
        return []
    from quantbench.quality.served_task import standard_task_problems

    return standard_task_problems(served.standard_tasks)


def device_problems(config: Config) -> list[str]:
    """A device asked for that this machine does not have (runtime.device, an engine's own)."""
    from quantbench.accelerator import detect

    found = detect()
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


def problems(config: Config) -> list[str]:
    """Every problem found, each naming the key, the value and the fix."""
    from quantbench.formats.base import VariantSpecError
    from quantbench.formats.registry import get_format
    from quantbench.model import ModelSourceError, check_local_folder
    from quantbench.quantize.build import check_calibration_file

    found: list[str] = device_problems(config) + data_problems(config)
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
    found += lora_problems(config, found)
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
    sizes: dict[str, WorkloadSize] = {}
    for name, spec in config.workloads.items():
        try:
            one = workload_sizes(config.model_copy(update={"workloads": {name: spec}}))[name]
        except (OSError, ValueError, UserError) as exc:
            path = getattr(spec.prompts, "path", None)
            where = f"workloads.{name}.prompts.path: {path}" if path else f"workloads.{name}"
            found.append(f"{where}: {exc}")
            continue
        sizes[name] = one
        asked = max(asked, one.max_output)
    found += memory_problems(config)
    found += disk_problems(config)
    found += engine_problems(config)
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
    from quantbench.accelerator import detect, resolve_device

    widths = model_widths(config)
    return {
        "device": f"{resolve_device(config.runtime.device)}: {detect().describe()}",
        "model_widths": None if widths is None else widths.__dict__,
        "max_output_tokens": max_output_tokens(config),
        "engine_contexts": {k: v[0] for k, v in engine_contexts(config).items()},
    }
