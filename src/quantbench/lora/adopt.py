"""Adopt an existing peft LoRA adapter instead of training one: check it, copy it, measure it."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from quantbench.accelerator import torch_device
from quantbench.accelerator.nvidia import Device
from quantbench.chat import hf_answers_fn
from quantbench.errors import UserError, shown
from quantbench.lora.merge import adapter_provenance
from quantbench.lora.spec import LoraSettings
from quantbench.lora.train import load_for_training
from quantbench.qa import QAItem, score
from quantbench.safetensors_header import SafetensorsError, read_header
from quantbench.schemas.common import HeldoutScore
from quantbench.schemas.finetune import FinetuneReport

log = logging.getLogger(__name__)


def adopt_adapter(
    base_dir: Path,
    adapter_dir: Path,
    heldout: list[QAItem],
    settings: LoraSettings,
    out_dir: Path,
    device: Device = "cpu",
) -> FinetuneReport:
    """Copy a given adapter into out_dir and report held-out accuracy without and with it
    (answered on ``device``)."""
    from peft import PeftModel

    if not adapter_dir.is_dir():
        raise UserError(
            f"lora.adapter_path: {adapter_dir} is not a folder; give a peft adapter folder "
            "(adapter_config.json + adapter_model.safetensors) or set lora.train: true"
        )
    provenance = adapter_provenance(adapter_dir)
    if provenance.peft_type != "LORA":
        raise UserError(
            f"lora.adapter_path: {adapter_dir} holds a {provenance.peft_type} adapter; "
            "only LoRA adapters can be merged"
        )
    model, tokenizer = load_for_training(base_dir, device)
    model.eval()
    before = score(heldout, hf_answers_fn(model, tokenizer, settings.answer_max_new_tokens))
    try:
        # the adapter's tensors read onto the model's device (peft's default is any GPU torch
        # sees, runtime.device: cpu or not)
        adapted = PeftModel.from_pretrained(model, adapter_dir, torch_device=torch_device(device))
    except Exception as exc:  # peft raises several types for a shape or key mismatch
        raise UserError(
            f"lora.adapter_path: the adapter in {adapter_dir} does not fit the base model "
            f"({type(exc).__name__}: {exc}); was it trained on another base?"
        ) from None
    adapted.eval()
    after = score(heldout, hf_answers_fn(adapted, tokenizer, settings.answer_max_new_tokens))
    log.info(
        "held-out accuracy: %d/%d without, %d/%d with the adapter",
        before.correct,
        before.total,
        after.correct,
        after.total,
    )
    shutil.copytree(adapter_dir, out_dir, dirs_exist_ok=True)
    return FinetuneReport(
        trained=False,
        adapter=provenance,
        accuracy_before=before.accuracy,
        accuracy_after=after.accuracy,
        heldout_before=HeldoutScore.model_validate(before.to_dict()),
        heldout_after=HeldoutScore.model_validate(after.to_dict()),
        params=settings.model_dump(mode="json"),
    )


# --- the adapter against the model, before any work (quantbench.preflight) -------------------

ADAPTER_WEIGHTS = "adapter_model.safetensors"


def _hub_name(name: object) -> str | None:
    """The model name of a hub id (``org/name`` -> ``name``, lowercased); None for a path or
    nothing: a path says where a base was, not which model it was (this pipeline's own adapters
    name ``models/base``)."""
    if not isinstance(name, str) or name.count("/") != 1 or name.startswith((".", "/", "~")):
        return None
    org, model = name.split("/")
    if not org or not model or Path(name).exists() or org in ("models", "data"):
        return None
    return model.lower()


def adapter_fit_problems(
    adapter_dir: Path,
    model_tensors: dict[str, tuple[int, ...]] | None,
    model_name: str | None,
) -> list[str]:
    """Why the adapter at ``adapter_dir`` cannot be merged into the model, from its
    adapter_config.json and its weights' safetensors header alone: not a LoRA adapter, a rank
    that is not a whole number, a base model of another name (``model_name``, where the model's
    own name is known), and each of its LoRA matrices against the model's weight of the module
    it adapts (``model_tensors``: name -> shape, out x in): a module the model does not have, an
    input or output width that differs (another hidden size), a rank other than the config's."""
    import json

    where = f"lora.adapter_path: {shown(adapter_dir)}"
    fix = "give an adapter trained on this model, or set lora.train: true"
    if not adapter_dir.is_dir():
        what = "a file" if adapter_dir.is_file() else "not a folder"
        return [
            f"{where} is {what}; give a peft adapter folder (adapter_config.json + "
            f"{ADAPTER_WEIGHTS}) or set lora.train: true"
        ]
    config_file = adapter_dir / "adapter_config.json"
    if not config_file.is_file():
        return [
            f"{where} is not a peft adapter folder (no adapter_config.json); give the adapter's "
            "folder or set lora.train: true"
        ]
    try:
        config = json.loads(config_file.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [f"{where}: adapter_config.json is not JSON ({exc}); save the adapter again"]
    if not isinstance(config, dict):
        return [f"{where}: adapter_config.json holds no object; save the adapter again"]
    found = []
    if config.get("peft_type") != "LORA":
        found.append(
            f"{where} holds a {shown(config.get('peft_type'))} adapter (peft_type), and only "
            f"LoRA adapters can be merged; {fix}"
        )
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        found.append(f"{where}: adapter_config.json's r is {rank!r}, not a rank >= 1; {fix}")
        rank = None
    patterns = config.get("rank_pattern") or {}
    base = config.get("base_model_name_or_path")
    if model_name is not None and _hub_name(base) not in (None, model_name.lower()):
        found.append(
            f"{where} was trained on {shown(base)} (adapter_config.json's "
            f"base_model_name_or_path), and the model is {shown(model_name)}; {fix} (if it was "
            "trained on this model under another name, write that name there)"
        )
    weights = adapter_dir / ADAPTER_WEIGHTS
    if not weights.is_file():
        if not (adapter_dir / "adapter_model.bin").is_file():
            found.append(f"{where} has no {ADAPTER_WEIGHTS}; copy the adapter's weights into it")
        return found  # a pickle's shapes cannot be read without loading it
    try:
        tensors = read_header(weights).tensors
    except (SafetensorsError, OSError) as exc:
        return [*found, f"{where}: {ADAPTER_WEIGHTS}: {exc}; copy the adapter again"]
    if model_tensors is None:
        return found  # the model is not on this machine yet (a hub id before its download)
    for name, tensor in sorted(tensors.items()):
        for part, side in ((".lora_A.weight", "A"), (".lora_B.weight", "B")):
            if not name.endswith(part) or len(tensor.shape) != 2:
                continue
            module = name.removesuffix(part).removeprefix("base_model.model.")
            target = model_tensors.get(f"{module}.weight")
            if target is None or len(target) != 2:
                found.append(
                    f"{where}: it adapts {module}, which the model does not have (its "
                    f"target_modules: {config.get('target_modules')!r}); {fix}"
                )
                return found  # one says it: the adapter is of another architecture
            out_features, in_features = target
            want_rank = next((v for k, v in patterns.items() if module.endswith(str(k))), rank)
            got_rank = tensor.shape[0] if side == "A" else tensor.shape[1]
            width = tensor.shape[1] if side == "A" else tensor.shape[0]
            model_width = in_features if side == "A" else out_features
            if width != model_width:
                found.append(
                    f"{where}: {name} is {tensor.shape[0]} x {tensor.shape[1]}, and the model's "
                    f"{module} takes {in_features} in and gives {out_features} out: the adapter "
                    f"was trained on a model of other widths; {fix}"
                )
                return found
            if want_rank is not None and got_rank != want_rank:
                found.append(
                    f"{where}: {name} has rank {got_rank}, and adapter_config.json says r = "
                    f"{want_rank}; save the adapter again (its config and weights disagree)"
                )
                return found
    return found
