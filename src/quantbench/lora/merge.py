"""Merge a LoRA adapter into its base model and prove the merge is exact.

Compare like with like: the adapter model and the merged model are both run in float32 on the same
token ids, so any difference is the merge's, not the dtype's (a correct merge differs by ~1e-4 in
the logits). The merged model is then saved in the deployment dtype; the saved file is checked to
hold exactly the float32 merge cast to that dtype, and the dtype's own cost is reported beside the
same cost measured on the base model, so nobody mistakes bf16 rounding for a bad merge.

On a GPU (``device="cuda"``) every forward pass and every logit comparison runs on it. The saved
weights' check does not: the merged model is saved from the CPU (safetensors writes host memory,
and a copy on the GPU would only be copied back) and reloaded there, and the check compares those
host tensors with the float32 merge cast to the saved dtype on the same CPU, so it proves what
the file holds, bit for bit, with one cast on one device.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from quantbench.accelerator import torch_device
from quantbench.accelerator.nvidia import Device
from quantbench.chat import chat_ids
from quantbench.errors import UserError
from quantbench.fsutil import sha256_tree
from quantbench.lora.spec import MergeSettings
from quantbench.native.dtype import compute_dtype
from quantbench.progress import step
from quantbench.qa import QAItem
from quantbench.schemas.common import AdapterProvenance
from quantbench.schemas.merge import LogitComparison, MergeReport, Probe

log = logging.getLogger(__name__)


class MergeVerificationError(UserError):
    """The merged model does not reproduce the adapter model within tolerance."""

    def __init__(self, message: str, report: MergeReport) -> None:
        super().__init__(message)
        self.report = report


def compare_logits(reference: list[Any], candidate: list[Any]) -> LogitComparison:
    """Compare per-prompt logit tensors ([positions, vocab] each) in float32."""
    import torch

    ref = torch.cat([r.float().reshape(-1, r.shape[-1]) for r in reference])
    cand = torch.cat([c.float().reshape(-1, c.shape[-1]) for c in candidate])
    diff = (ref - cand).abs()
    agree = (ref.argmax(-1) == cand.argmax(-1)).float().mean()
    return LogitComparison(
        max_abs_diff=float(diff.max()),
        mean_abs_diff=float(diff.mean()),
        next_token_agreement=float(agree),
        positions=int(ref.shape[0]),
    )


def verification_failures(comparison: LogitComparison, settings: MergeSettings) -> list[str]:
    """Each tolerance the merge breaks, as a sentence naming the param that sets it."""
    failures = []
    if comparison.max_abs_diff > settings.max_abs_logit_diff:
        failures.append(
            f"max |logit difference| {comparison.max_abs_diff:.3g} > "
            f"merge.max_abs_logit_diff {settings.max_abs_logit_diff:g}"
        )
    if comparison.next_token_agreement < settings.min_next_token_agreement:
        failures.append(
            f"next-token agreement {comparison.next_token_agreement:.4f} < "
            f"merge.min_next_token_agreement {settings.min_next_token_agreement:g}"
        )
    return failures


def probe_inputs(tokenizer: Any, items: list[QAItem]) -> list[list[int]]:
    """Token ids of each held-out question with its expected answer: the positions compared."""
    return [
        chat_ids(
            tokenizer,
            [{"role": "user", "content": i.question}, {"role": "assistant", "content": i.answer}],
            add_generation_prompt=False,
        )
        for i in items
    ]


def logits_of(model: Any, inputs: list[list[int]], device: str = "cpu") -> list[Any]:
    """Each prompt's logits, computed and kept on ``device`` (a torch device string)."""
    import torch

    with torch.inference_mode():
        return [
            model(input_ids=torch.tensor([ids], device=device)).logits[0].float() for ids in inputs
        ]


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def saved_weights_mismatch(merged_fp32: Any, saved: Any, dtype: Any) -> list[str]:
    """Names of tensors in the saved model that are not exactly the float32 merge cast to dtype."""
    import torch

    saved_state = saved.state_dict()
    bad = []
    for name, tensor in merged_fp32.state_dict().items():
        other = saved_state.get(name)
        if other is None or not torch.equal(tensor.to(dtype), other):
            bad.append(name)
    return bad


def adapter_provenance(adapter_dir: Path) -> AdapterProvenance:
    config_path = adapter_dir / "adapter_config.json"
    if not config_path.is_file():
        raise UserError(
            f"{adapter_dir} is not a peft adapter folder (no adapter_config.json); "
            "check lora.adapter_path or rerun the finetune stage"
        )
    config = json.loads(config_path.read_text(encoding="utf-8"))
    return AdapterProvenance(
        path=str(adapter_dir),
        sha256=sha256_tree(adapter_dir),
        peft_type=config.get("peft_type"),
        r=config.get("r"),
        lora_alpha=config.get("lora_alpha"),
        target_modules=sorted(config.get("target_modules") or []),
        base_model_name_or_path=config.get("base_model_name_or_path"),
    )


def merge_and_verify(
    base_dir: Path,
    adapter_dir: Path,
    items: list[QAItem],
    settings: MergeSettings,
    out_dir: Path,
    device: Device = "cpu",
) -> MergeReport:
    """Merge on ``device``, save to out_dir in settings.dtype, and return the verification
    report.

    Raises MergeVerificationError (after building the full report) if a tolerance is broken;
    the caller writes the report either way so the numbers are never lost.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    provenance = adapter_provenance(adapter_dir)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    inputs = probe_inputs(tokenizer, items)
    save_dtype = _dtype(settings.dtype)
    on = torch_device(device)
    # the save dtype's cost is computed on its weights in the save dtype itself where it is
    # native (a GPU; a Xeon with AVX512-BF16), in float32 on a CPU where bf16 is emulated (two
    # emulated bf16 passes were 45 of the merge's 148 s on an AVX2-only EPYC)
    native = device == "cuda" or save_dtype != torch.bfloat16
    cost_in = save_dtype if native else _dtype(compute_dtype())

    with step("base model logits (float32 and save dtype)"):
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).to(on)
        base_fp32 = logits_of(base, inputs, on)
        base_cast = logits_of(base.to(save_dtype).to(cost_in), inputs, on)
        base.to(torch.float32)
    with step("adapter model logits (float32)"):
        # the adapter's tensors read onto the model's device (peft's default: any GPU torch sees)
        adapter_model = PeftModel.from_pretrained(base, adapter_dir, torch_device=on)
        adapter_logits = logits_of(adapter_model, inputs, on)
    with step("merging"):
        merged = adapter_model.merge_and_unload()
        merged_logits = logits_of(merged, inputs, on)
    exactness = compare_logits(adapter_logits, merged_logits)
    log.info("merge exactness (float32): %s", exactness)

    with step(f"saving merged model ({settings.dtype})"):
        # from the CPU, where the file's check below reads it (the module docstring says why)
        merged.to("cpu")
        merged.to(save_dtype).save_pretrained(out_dir, safe_serialization=True)
        tokenizer.save_pretrained(out_dir)
        merged.to(torch.float32)
    with step("reloading the saved model"):
        saved = AutoModelForCausalLM.from_pretrained(out_dir, dtype=save_dtype)
        mismatched = saved_weights_mismatch(merged, saved, save_dtype)
        saved_logits = logits_of(saved.to(cost_in).to(on), inputs, on)

    failures = verification_failures(exactness, settings)
    if mismatched:
        failures.append(
            f"saved weights differ from the merge for {len(mismatched)} tensors: {mismatched[:5]}"
        )
    report = MergeReport(
        adapter=provenance,
        base_sha256=sha256_tree(base_dir, "*.safetensors"),
        merged_sha256=sha256_tree(out_dir, "*.safetensors"),
        probe=Probe(prompts=len(inputs), positions=exactness.positions),
        exactness_float32=exactness,
        saved_dtype=settings.dtype,
        saved_weights_exact=not mismatched,
        dtype_cost={
            "merged_saved_vs_adapter_float32": compare_logits(adapter_logits, saved_logits),
            "base_cast_vs_base_float32": compare_logits(base_fp32, base_cast),
        },
        dtype_cost_computed_in=str(cost_in).removeprefix("torch."),
        tolerances=settings.model_dump(mode="json"),
        passed=not failures,
        failures=failures,
    )
    if failures:
        raise MergeVerificationError(
            "merge verification failed: "
            + "; ".join(failures)
            + ". Does the adapter belong to this base model? See reports/merge.json.",
            report,
        )
    return report
