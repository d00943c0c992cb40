"""Engine-specific corrections to the roofline: which engine runs a variant, what it adds.

Per-step overhead: an eager engine adds a fixed cost per forward step (Python, op dispatch,
sampling) that for a small model on a CPU is as large as the weight streaming itself. On a
measured machine the transformers engine's overhead is probed once (cached with the hardware
figures): greedy ``generate`` on a tiny Llama whose matmuls cost nothing, at two layer counts,
so ``per_step + layers * per_layer`` extends to any depth. llama.cpp runs a compiled graph and
vLLM replays CUDA graphs, whose per-step costs are small beside their kernels: 0 for them.

Kernel efficiencies: where an engine's kernels cannot be probed through torch (llama.cpp's
quantised dot products on a CPU), named efficiencies relative to the measured figures stand in,
with their provenance; the comparison's fit replaces them once the benchmark has run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quantbench.estimate.arch import Architecture
from quantbench.estimate.errors import EstimateInputError
from quantbench.estimate.hardware import EngineOverhead, HardwareSpec
from quantbench.estimate.proxy import decode_timing

ENGINES = ("transformers", "llamacpp", "vllm")
ENGINE_CHOICES = ("auto", "none", *ENGINES)
# Measured-engine names that behave like an engine we model (the generate-loop proxy is
# transformers without its server).
ENGINE_ALIASES = {"hf-generate-proxy": "transformers", "llama.cpp": "llamacpp"}
# Tiny Llama used for the probe: every matmul is negligible, so a step's time is overhead.
PROBE_LAYERS = (2, 10)
PROBE_HIDDEN = 64
PROBE_PROMPT_TOKENS = 64
PROBE_NEW_TOKENS = 33
PROBE_REPEATS = 3


@dataclass(frozen=True)
class KernelEfficiency:
    """An engine's kernel efficiencies relative to a device's (measured) figures."""

    compute: float
    bandwidth: float
    source: str


# llama.cpp on a measured CPU, relative to the torch int8 GEMM probe and the copy rate.
# Calibrated, not derived: llama-server (llama-cpp-python 0.3.36 sources, 1 thread, load ~2.9)
# on the project's SmolLM2-135M files decoded Q8_0 at 10.2-10.6 ms/token (143 MB/step: 0.57 of
# the 24.4 GB/s copy rate) and Q4_K_M at 10.8-12.6 ms/token (104 MB: 0.39); 128-token prompts
# took 295-364 ms (76-94 GFLOP/s: ~0.2 of the 0.43 TOP/s int8 probe). At one thread its
# dequantising dot products, not memory, bound decode, so Q4_K_M is no faster than Q8_0.
LLAMACPP_CPU_KERNELS = KernelEfficiency(
    compute=0.2,
    bandwidth=0.5,
    source="llama.cpp CPU kernel efficiencies calibrated on this project's machine "
    "(compute 0.2 of the int8 probe, bandwidth 0.5 of the copy rate)",
)
ENGINE_KERNELS: dict[tuple[str, str], KernelEfficiency] = {
    ("llamacpp", "cpu"): LLAMACPP_CPU_KERNELS
}


def kernel_efficiency(engine: str, hardware: HardwareSpec) -> KernelEfficiency | None:
    """The engine's stand-in kernel efficiencies on this kind of device, if it has any."""
    return ENGINE_KERNELS.get((ENGINE_ALIASES.get(engine, engine), hardware.kind))


def resolve_engine(engine: str, weight_format: str, hardware: HardwareSpec) -> str:
    """The engine an estimate models: explicit, or ``auto`` by device and format.

    ``auto``: on a CPU, GGUF runs on llama.cpp and the rest on transformers (the engines this
    project serves them with there); on a GPU, vLLM.
    """
    engine = ENGINE_ALIASES.get(engine, engine)
    if engine not in ENGINE_CHOICES:
        raise EstimateInputError(f"engine {engine!r} is not known; use one of {ENGINE_CHOICES}")
    if engine != "auto":
        return engine
    if hardware.kind == "gpu":
        return "vllm"
    return "llamacpp" if weight_format == "gguf" else "transformers"


def step_overhead(hardware: HardwareSpec, engine: str, arch: Architecture) -> tuple[float, str]:
    """(overhead ms per step, where it comes from) for ``engine`` on ``hardware``."""
    engine = ENGINE_ALIASES.get(engine, engine)
    measured = hardware.measurement.engine_overheads if hardware.measurement else {}
    if engine in measured:
        o = measured[engine]
        total = o.per_step_ms + arch.num_layers * o.per_layer_ms
        return total, (
            f"{engine} overhead measured here: {o.per_step_ms:.2f} ms/step + "
            f"{arch.num_layers} x {o.per_layer_ms:.3f} ms/layer = {total:.2f} ms/step"
        )
    return 0.0, f"no {engine} overhead measured on {hardware.name}: pure roofline (0 ms/step)"


def measure_transformers_overhead(threads: int) -> EngineOverhead:
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


def add_engine_overhead(hardware: HardwareSpec, engine: str) -> HardwareSpec:
    """A measured spec with the engine's overhead measured and added (nothing saved)."""
    engine = ENGINE_ALIASES.get(engine, engine)
    measurement = hardware.measurement
    if measurement is None or engine != "transformers" or engine in measurement.engine_overheads:
        return hardware
    overhead = measure_transformers_overhead(measurement.threads)
    overheads = {**measurement.engine_overheads, engine: overhead}
    return hardware.model_copy(
        update={"measurement": measurement.model_copy(update={"engine_overheads": overheads})}
    )


def with_engine_overhead(
    hardware: HardwareSpec, engine: str, cache_dir: Path | None = None
) -> HardwareSpec:
    """:func:`add_engine_overhead`, and the result cached (``quantbench estimate`` on its own)."""
    updated = add_engine_overhead(hardware, engine)
    if updated is not hardware:
        from quantbench.estimate.machine import save_measured

        save_measured(updated, cache_dir)
    return updated
