"""llm-compressor's one-shot pass, as the formats made with it (awq, w8a8) run it.

Each such format only says which modifiers its recipe stands for and what its checkpoint is;
:func:`compress` does the rest, the same for every one: the merged model loaded to calibrate, the
calibration passages tokenized, ``oneshot`` with the format's modifiers, the model saved in
bf16 as compressed-tensors, the tokenizer copied beside it.

Where it computes is chosen here, not by llm-compressor: its sequential pipeline onloads each
layer to its "main device", any accelerator torch sees, whatever the model was loaded on. So
the model is loaded onto ``runtime.device`` (the whole model on the GPU: no layer is copied
there and back per pass) and the pipeline's main device is pinned to the same for the call
(:func:`calibrating_on`); on the CPU both are the CPU, a GPU torch sees included.

CPU workaround: during the scale search llm-compressor pins cached activations in page-locked
memory for faster host-to-device copies. On a CPU-only torch there is no device and pin_memory()
raises "Cannot access accelerator device"; pinning is pointless without a GPU to copy to, so on
the CPU it is skipped for the duration of the call (and left alone on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quantbench.accelerator import torch_device
from quantbench.accelerator.nvidia import Device
from quantbench.formats.build import (
    BuildRequest,
    BuildResult,
    calibration_dtype,
    copy_tokenizer,
    hf_weights_file,
    tokenize_calibration,
)
from quantbench.native.dtype import torch_dtype
from quantbench.progress import quiet_chatty_loggers

# The libraries whose versions a variant made here records (its Format.libraries).
LIBRARIES: tuple[str, ...] = (
    "llmcompressor",
    "compressed-tensors",
    "torch",
    "transformers",
    "safetensors",
)
# The recipe llm-compressor saves next to the weights; kept, it documents the exact modifiers.
RECIPE_FILE = "recipe.yaml"


@contextmanager
def calibrating_on(device: Device) -> Iterator[None]:
    """llm-compressor's oneshot computing on ``device``: its sequential pipeline's main device
    pinned to it (the pipeline asks torch for any accelerator otherwise), cached activations
    pinned in page-locked memory only where there is a GPU to copy them to."""
    import torch
    from llmcompressor.pipelines.cache import IntermediatesCache
    from llmcompressor.pipelines.sequential import pipeline

    main = torch.device(torch_device(device))
    originals = (pipeline.get_main_device, IntermediatesCache.pin_memory)

    def _skip(self: object, batch_index: int, input_names: list[str] | None = None) -> None:
        return None

    pipeline.get_main_device = lambda: main  # type: ignore[assignment]
    if device != "cuda":
        IntermediatesCache.pin_memory = _skip  # type: ignore[method-assign]
    try:
        yield
    finally:
        pipeline.get_main_device, IntermediatesCache.pin_memory = originals  # type: ignore[method-assign]


def compressed_weights(config: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(weights args, input-activation args) of a compressed-tensors checkpoint's first group."""
    q = (config or {}).get("quantization_config") or {}
    if str(q.get("quant_method", "")).lower() != "compressed-tensors":
        return {}, {}
    group = next(iter((q.get("config_groups") or {}).values()), {}) or {}
    return dict(group.get("weights") or {}), dict(group.get("input_activations") or {})


def load_for_calibration(merged_dir: Path, compute: str, device: Device) -> Any:
    """The merged model in ``compute``, on ``device`` whole (llm-compressor's quantizers)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch_dtype(compute))
    return model.to(torch_device(device))


def compress(
    request: BuildRequest, modifiers: Callable[[], list[Any]], details: dict[str, Any]
) -> BuildResult:
    """Build ``request`` with llm-compressor: one oneshot pass of ``modifiers()`` (made after
    llm-compressor's import has been quieted) over the calibration passages, the checkpoint
    saved compressed in bf16; ``details`` (what the checkpoint is) go into its record with the
    dtype and device it was calibrated in."""
    assert request.calibration is not None, f"validated before: {request.name} needs calibration"
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoTokenizer

    quiet_chatty_loggers()  # llm-compressor's loguru handler is made by its import
    tokenizer = AutoTokenizer.from_pretrained(request.merged_dir)
    # calibrate in bf16 on a GPU, on the CPU in what it computes fastest (float32 where bf16 is
    # emulated: AWQ took 14 minutes in bf16 on an AVX2-only EPYC), save in bf16 as always
    compute = calibration_dtype(request.device)
    model = load_for_calibration(request.merged_dir, compute, request.device)
    rows = tokenize_calibration(tokenizer, request.calibration)
    # Already tokenized (input_ids column), so llm-compressor uses these ids as they are.
    dataset = Dataset.from_list(rows)
    with calibrating_on(request.device):
        oneshot(
            model=model,
            tokenizer=tokenizer,
            dataset=dataset,
            recipe=modifiers(),
            num_calibration_samples=len(rows),
            max_seq_length=request.calibration.max_tokens,
            shuffle_calibration_samples=False,
        )
    if compute != "bfloat16":
        model.to(torch.bfloat16)  # the checkpoint's own dtype, whatever calibration ran in
    model.save_pretrained(request.out_dir, save_compressed=True)
    copy_tokenizer(request.merged_dir, request.out_dir)
    return BuildResult(
        hf_weights_file(request.out_dir),
        details={**details, "calibrated_in": compute, "calibrated_on": request.device},
    )


__all__ = [
    "LIBRARIES",
    "RECIPE_FILE",
    "calibrating_on",
    "compress",
    "compressed_weights",
    "load_for_calibration",
]
