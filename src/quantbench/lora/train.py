"""Train a LoRA adapter with peft on the shipped chats, measuring held-out accuracy before and after.

A plain loop rather than `transformers.Trainer`: a few dozen steps on one CPU thread need no
scheduler, checkpointing or distributed setup, and the loop stays readable and deterministic.

On a GPU (``device="cuda"``) the model and each batch are on it and the training steps' forward
passes run under bf16 autocast (the weights, the adapter's gradients and the optimizer's state
stay float32); on the CPU nothing differs from a plain float32 loop.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from pathlib import Path
from typing import Any

from quantbench.accelerator import torch_device
from quantbench.accelerator.nvidia import Device
from quantbench.chat import hf_answers_fn
from quantbench.errors import UserError
from quantbench.fsutil import sha256_file
from quantbench.lora.data import collate, encode, load_chats
from quantbench.lora.spec import LoraSettings
from quantbench.qa import QAItem, score
from quantbench.runtime import seed_everything
from quantbench.schemas.common import HeldoutScore
from quantbench.schemas.finetune import FinetuneReport, TrainData

log = logging.getLogger(__name__)


def load_for_training(base_dir: Path, device: Device = "cpu") -> tuple[Any, Any]:
    """The base model in float32 (adapter gradients in bf16 lose too much) on ``device``, and
    its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    return model.to(torch_device(device)), tokenizer


def training_autocast(device: Device) -> Any:
    """The context of one training step's forward pass: bf16 autocast on a GPU (its tensor
    cores' type; float32 master weights and gradients), nothing on the CPU (float32 throughout,
    as the CPU numbers have always been)."""
    import torch

    if device == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def lora_config(settings: LoraSettings) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        task_type="CAUSAL_LM",
    )


def target_problem(linear_names: set[str], targets: list[str]) -> str | None:
    """The message for target modules the model does not have (None: all found): the same
    check where the model is loaded for training and, from its config alone, before any work
    (quantbench.preflight)."""
    missing = [t for t in targets if t not in linear_names]
    if not missing:
        return None
    return (
        f"lora.target_modules: {missing} not found in the model; give names of its linear "
        f"layers: {', '.join(sorted(linear_names))}"
    )


def check_targets(model: Any, targets: list[str]) -> None:
    """Fail early, naming the model's linear layers, when a target module does not exist."""
    import torch

    names = {
        n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
    }
    problem = target_problem(names, targets)
    if problem:
        raise UserError(problem)


def train_adapter(
    base_dir: Path,
    train_path: Path,
    heldout: list[QAItem],
    settings: LoraSettings,
    seed: int,
    out_dir: Path,
    device: Device = "cpu",
) -> FinetuneReport:
    """Train on ``device``, save the adapter into out_dir, and return a report of what
    happened."""
    import torch
    from peft import get_peft_model

    seed_everything(seed)
    model, tokenizer = load_for_training(base_dir, device)
    check_targets(model, list(settings.target_modules))
    chats = load_chats(train_path)
    examples = [encode(tokenizer, chat, settings.max_length) for chat in chats]
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )

    model.eval()
    before = score(heldout, hf_answers_fn(model, tokenizer, settings.answer_max_new_tokens))
    log.info("held-out accuracy before training: %d/%d", before.correct, before.total)

    model = get_peft_model(model, lora_config(settings))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate
    )
    rng = random.Random(seed)
    order: list[int] = []
    losses: list[float] = []
    start = time.perf_counter()
    model.train()
    for step in range(1, settings.steps + 1):
        batch = []
        for _ in range(min(settings.batch_size, len(examples))):
            if not order:  # a new shuffled pass over the data
                order = list(range(len(examples)))
                rng.shuffle(order)
            batch.append(examples[order.pop()])
        inputs = {k: v.to(torch_device(device)) for k, v in collate(batch, pad_id).items()}
        with training_autocast(device):
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 5))
        if step == 1 or step % 5 == 0 or step == settings.steps:
            elapsed = time.perf_counter() - start
            log.info("step %d/%d loss %.4f (%.1f s)", step, settings.steps, losses[-1], elapsed)
    train_seconds = time.perf_counter() - start

    model.eval()
    after = score(heldout, hf_answers_fn(model, tokenizer, settings.answer_max_new_tokens))
    log.info("held-out accuracy after training: %d/%d", after.correct, after.total)
    # Record the base as a stable relative path, not this machine's absolute path, so the saved
    # adapter_config.json (and its hash) is the same on every machine.
    model.peft_config["default"].base_model_name_or_path = str(base_dir)
    model.save_pretrained(out_dir)
    return FinetuneReport(
        trained=True,
        train_data=TrainData(
            path=str(train_path), sha256=sha256_file(train_path), chats=len(chats)
        ),
        trainable_parameters=trainable,
        steps=settings.steps,
        losses=losses,
        train_seconds=round(train_seconds, 2),
        accuracy_before=before.accuracy,
        accuracy_after=after.accuracy,
        heldout_before=HeldoutScore.model_validate(before.to_dict()),
        heldout_after=HeldoutScore.model_validate(after.to_dict()),
        params=settings.model_dump(mode="json"),
    )
