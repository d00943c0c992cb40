"""`transformers serve`: bf16, GPTQ (gptqmodel), AWQ and W8A8 (compressed-tensors) checkpoints.

Protocol quirks handled elsewhere by what this module declares: streams end without `data: [DONE]`
(the last chunk carries `usage`), the request's `model` must equal the served path exactly, and
unknown request fields get HTTP 422, so no extra request fields are declared.

W8A8 is served with W8A8's numbers, not its arithmetic: compressed-tensors dequantizes the int8
weights to the model dtype on the first forward and quantize-dequantizes each linear's input per
token (int8 rounding) before a float matmul (see quantbench.formats.w8a8).
"""

from __future__ import annotations

import importlib.metadata
import sys
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from quantbench.accelerator import torch_device
from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineSettings, LaunchSpec
from quantbench.engines.device import DEVICE_HELP, intended_device, serving_device
from quantbench.engines.memory import GpuNeeds, Need, hf_kv_bytes_per_token
from quantbench.engines.registry import register_engine
from quantbench.errors import UserError
from quantbench.fsutil import tree_size
from quantbench.hfconfig import read_hf_config
from quantbench.load.requests import RequestProfile
from quantbench.native.dtype import serving_dtype
from quantbench.schemas.hardware import EngineOverhead


class TransformersSettings(EngineSettings):
    ENGINE_DEFAULTS: ClassVar[dict[str, Any]] = {
        "continuous_batching": False,
        "attn_implementation": None,
        "dtype": "auto",
    }
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$",
        description=f"{DEVICE_HELP} `--device cuda:0` or `--device cpu`; cuda:N serves on GPU N "
        "(two servers side by side on a machine with several GPUs).",
    )
    dtype: str = Field(
        "auto",
        description="`--dtype`: auto keeps the checkpoint's dtype; native: on a CPU, bfloat16 "
        "where it computes bf16 natively, float32 where it is emulated (quantbench.native.dtype); "
        "on a GPU bfloat16 (float16 before compute capability 8.0), nothing timed.",
    )
    continuous_batching: bool = Field(
        False, description="Paged-attention continuous batching (`--continuous-batching`)."
    )
    cb_num_blocks: int = Field(
        256,
        ge=1,
        description="KV-cache blocks for continuous batching. Bound it: the default grew the "
        "process to 14 GB on CPU and the first request took 46 s.",
    )
    cb_block_size: int = Field(32, ge=1, description="Tokens per KV-cache block.")
    cb_max_batch_tokens: int = Field(512, ge=1, description="Tokens per continuous batch.")
    attn_implementation: Literal["sdpa", "eager", "flex_attention"] | None = Field(
        None,
        description="`--attn-implementation`: sdpa (PyTorch's fused attention, the default on "
        "CPU), eager (plain matmuls, the reference numerics), flex_attention. No memory of its "
        "own at these lengths. None: transformers' choice for the device.",
    )


# Tiny Llama the overhead probe decodes with: every matmul is negligible, so a step's time is
# the engine's overhead (Python, op dispatch, sampling).
PROBE_LAYERS = (2, 10)
PROBE_HIDDEN = 64
PROBE_PROMPT_TOKENS = 64
PROBE_NEW_TOKENS = 33
PROBE_REPEATS = 3


def decode_timing(
    model: Any, prompt: Any, pad_token_id: int, new_tokens: int, repeats: int
) -> tuple[float, float]:
    """(seconds for one token, seconds per further token) of greedy `generate` at batch 1.

    Best of `repeats` after a warm-up; forcing the length (min_new_tokens) so every run decodes
    exactly as many steps. Shared by the transformers overhead probe and the estimator's generate proxy
    (:mod:`quantbench.estimate.proxy`).
    """
    import torch

    mask = torch.ones_like(prompt)

    def generate(tokens: int) -> float:
        start = time.perf_counter()
        model.generate(
            prompt,
            attention_mask=mask,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=pad_token_id,
        )
        return time.perf_counter() - start

    with torch.inference_mode():
        generate(2)  # warm-up
        first = min(generate(1) for _ in range(repeats))
        whole = min(generate(new_tokens) for _ in range(repeats))
    return first, (whole - first) / (new_tokens - 1)


def measure_overhead(threads: int) -> EngineOverhead:
    """Time greedy decoding of a tiny Llama at two depths; fit per-step and per-layer costs."""
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    def decode_ms(layers: int) -> float:
        config = LlamaConfig(
            hidden_size=PROBE_HIDDEN,
            intermediate_size=2 * PROBE_HIDDEN,
            num_hidden_layers=layers,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=PROBE_HIDDEN // 2,
            vocab_size=256,
            tie_word_embeddings=True,
        )
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
        prompt = torch.zeros(1, PROBE_PROMPT_TOKENS, dtype=torch.long)
        _, per_token = decode_timing(model, prompt, 0, PROBE_NEW_TOKENS, PROBE_REPEATS)
        return per_token * 1e3

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        shallow, deep = (decode_ms(layers) for layers in PROBE_LAYERS)
    finally:
        torch.set_num_threads(previous)
    per_layer = max(0.0, (deep - shallow) / (PROBE_LAYERS[1] - PROBE_LAYERS[0]))
    return EngineOverhead(
        per_layer_ms=per_layer,
        per_step_ms=max(0.0, shallow - PROBE_LAYERS[0] * per_layer),
        version=f"transformers {transformers.__version__}, torch {torch.__version__}",
        method=f"greedy generate, tiny Llama (hidden {PROBE_HIDDEN}) at {PROBE_LAYERS} layers",
    )


class TransformersEngine(Engine):
    name: ClassVar[str] = "transformers"
    formats: ClassVar[frozenset[str]] = frozenset({"bf16", "gptq", "awq", "w8a8"})
    full_sweep: ClassVar[dict[str, list[Any]]] = {"continuous_batching": [True, False]}
    server: ClassVar[str] = (
        "`transformers serve <model>` (transformers 5.17, extra `[serving]`): continuous batching on/off and its cache bounds as settings"
    )
    settings_model: ClassVar[type[EngineSettings]] = TransformersSettings
    startup_estimate_s: ClassVar[float] = (
        6.0  # 5.6-5.9 s measured for `transformers serve` on 2 cores
    )
    # transformers serve rejects unknown fields with 422 and sends usage on its own.
    profile: ClassVar[RequestProfile] = RequestProfile("transformers", {}, ("generation_config",))
    # the estimator's generate-loop proxy is transformers without its server
    aliases: ClassVar[tuple[str, ...]] = ("hf-generate-proxy",)
    overhead_probe: ClassVar[bool] = True

    def estimate_preference(self, device_kind: str) -> int:
        return 2 if device_kind == "cpu" else 1  # what this project serves with on a CPU

    def measure_overhead(self, threads: int) -> EngineOverhead | None:
        return measure_overhead(threads)

    def holds_as(self, fmt: str, settings: Any = None) -> str | None:
        # compressed-tensors checkpoints (our AWQ and W8A8) are decompressed to the model's dtype
        # on a GPU as on a CPU: transformers 5.17's CompressedTensorsHfQuantizer applies their
        # scheme with run_compressed=False and decompresses the weights at load or on the first
        # forward, whatever the device (its only kernel path, FP8 matmuls, is for FP8 schemes;
        # our int4 and int8 ones have none in transformers). So the server holds and streams
        # bf16 weights, fp32 where it was started in float32 (`dtype: native` on a CPU that
        # emulates bf16), fp16 on a GPU before Ampere (native there), as it does the bf16
        # checkpoint. GPTQ runs on gptqmodel's packed kernels.
        held = None
        if settings is not None:
            device = intended_device(settings.device)
            dtype = serving_dtype(settings.dtype, device)
            if dtype == "float32":
                held = "fp32"
            elif dtype == "float16" and device == "cuda":
                held = "fp16"
        if fmt in ("awq", "w8a8"):
            return held or "bf16"
        return held if fmt == "bf16" else None

    def model_name_in(self, argv: list[str]) -> str | None:
        # `transformers serve` serves its model under the path it was given (requests must name
        # it exactly), and lists only the hub cache's models at /v1/models
        return argv[argv.index("serve") + 1] if "serve" in argv[:-1] else None

    def launch(
        self, artifact: Artifact, settings: TransformersSettings, host: str, port: int
    ) -> LaunchSpec:
        device = serving_device(self.name, settings.device)
        model = str(artifact.path.resolve())
        cli = Path(sys.executable).with_name("transformers")
        argv = [str(cli), "serve", model, "--host", host, "--port", str(port)]
        on = settings.device if settings.device.startswith("cuda:") else torch_device(device)
        argv += ["--device", on, "--dtype", serving_dtype(settings.dtype, device)]
        argv += ["--log-level", "info"]
        if settings.continuous_batching:
            argv += [
                "--continuous-batching",
                "--cb-num-blocks",
                str(settings.cb_num_blocks),
                "--cb-block-size",
                str(settings.cb_block_size),
                "--cb-max-batch-tokens",
                str(settings.cb_max_batch_tokens),
            ]
        if settings.attn_implementation is not None:
            argv += ["--attn-implementation", settings.attn_implementation]
        argv += settings.extra_args
        hub_cache = Path(".cache/hf-hub").resolve()
        hub_cache.mkdir(parents=True, exist_ok=True)
        env = {
            **self.base_env(settings),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            # /v1/models answers 500 unless the hub cache folder exists.
            "HF_HUB_CACHE": str(hub_cache),
        }
        return self.launch_spec(argv, settings, host, port, model, env=env, artifact=artifact)

    def memory_needs(self, artifact: Artifact, settings: TransformersSettings) -> tuple[Need, ...]:
        """On a CPU, the checkpoint, and with continuous batching its paged KV cache (bf16); on a
        GPU nothing: `--device cuda:N` loads the weights onto the GPU (device_map)."""
        if intended_device(settings.device) == "cuda":
            return ()
        return self._held(artifact, settings)

    def gpu_memory_needs(
        self, artifact: Artifact, settings: TransformersSettings
    ) -> GpuNeeds | None:
        """On a GPU, what :meth:`memory_needs` counts on a CPU. The checkpoint's size is a lower
        bound: AWQ and W8A8 are decompressed to bf16 there too (holds_as)."""
        if intended_device(settings.device) != "cuda":
            return None
        index = int(settings.device.split(":")[1]) if ":" in settings.device else 0
        return GpuNeeds(
            self._held(artifact, settings),
            gpus=(index,),
            fix="serve a smaller variant, lower cb_num_blocks, or set engines.transformers."
            "device: cpu",
        )

    def _held(self, artifact: Artifact, settings: TransformersSettings) -> tuple[Need, ...]:
        needs: list[Need] = [(tree_size(artifact.path), "weights")]
        if settings.continuous_batching:
            try:
                per_token = hf_kv_bytes_per_token(read_hf_config(artifact.path), 2.0)
            except (KeyError, ValueError, TypeError, UserError):
                return tuple(needs)
            tokens = settings.cb_num_blocks * settings.cb_block_size
            needs.append(
                (int(tokens * per_token), f"KV cache (cb_num_blocks x cb_block_size = {tokens})")
            )
        return tuple(needs)

    def version(self, settings: TransformersSettings) -> str:
        return importlib.metadata.version("transformers")

    def reset_prefix_cache(self, base_url: str, settings: TransformersSettings) -> str:
        return "none"  # transformers serve 5.17 keeps no KV cache across requests

    def max_batch(self, settings: TransformersSettings) -> int | None:
        # Without continuous batching `transformers serve` generates for one request at a time.
        return None if settings.continuous_batching else 1

    def suggest_sweep(
        self, centre: int, kv_capacity: int, input_len: int, output_len: int
    ) -> dict[str, list[Any]]:
        return {"continuous_batching": [False, True] if centre >= 2 else [False]}


register_engine(TransformersEngine())
