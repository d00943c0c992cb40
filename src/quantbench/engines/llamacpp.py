"""llama.cpp's native `llama-server`: GGUF files, continuous batching over `-np` slots.

Not `python -m llama_cpp.server`: it serializes requests and by default aborts a running request
when a new one arrives, which makes it unfit for load tests.

On a GPU (``device`` resolved to cuda: engines/device.py) every layer is offloaded by default
(``-ngl all``, a draft model's too: ``-ngld all``), its weights and KV cache held on the GPUs
(split by layers over every GPU found, llama.cpp's default); on a CPU ``-ngl 0`` as always.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from quantbench.engines.artifact import Artifact
from quantbench.engines.base import Engine, EngineSettings, KernelEfficiency, LaunchSpec
from quantbench.engines.device import (
    DEVICE_HELP,
    DeviceSetting,
    gpus,
    intended_device,
    serving_device,
)
from quantbench.engines.memory import GpuNeeds, Need, gguf_kv_bytes_per_token
from quantbench.engines.registry import register_engine
from quantbench.errors import UserError
from quantbench.formats.gguf_header import read_header
from quantbench.load.requests import RequestProfile
from quantbench.native import llama_build
from quantbench.schemas.env import LlamaCppKernels

CONTEXT_ROUNDING = 256
# What llama-server does without `-np` (its default, -1 = auto): 4 slots over one unified KV pool
# of ctx_size tokens, any slot using up to all of it. Its start-up log says so on this build:
# "n_slots = 4, n_ctx_slot = 4096, kv_unified = 'true'" for -c 4096.
AUTO_SLOTS = 4
KvType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
FLOAT_KV = ("f32", "f16", "bf16")

# llama.cpp on a measured CPU, relative to the torch int8 GEMM probe and the copy rate.
# Calibrated, not derived: llama-server (llama-cpp-python 0.3.36 sources, 1 thread, load ~2.9)
# on the project's SmolLM2-135M files decoded Q8_0 at 10.2-10.6 ms/token (143 MB/step: 0.57 of
# the 24.4 GB/s copy rate) and Q4_K_M at 10.8-12.6 ms/token (104 MB: 0.39); 128-token prompts
# took 295-364 ms (76-94 GFLOP/s: ~0.2 of the 0.43 TOP/s int8 probe). At one thread its
# dequantising dot products, not memory, bound decode, so Q4_K_M is no faster than Q8_0.
CPU_KERNELS = KernelEfficiency(
    compute=0.2,
    bandwidth=0.5,
    source="llama.cpp CPU kernel efficiencies calibrated on this project's machine "
    "(compute 0.2 of the int8 probe, bandwidth 0.5 of the copy rate)",
)


class LlamaCppSettings(EngineSettings):
    # llama-server's own defaults. Held otherwise here, and said so in the report: flash_attn
    # off (auto answered garbage on CPU with this release, see the field) and, outside these,
    # ctx_size and threads.
    ENGINE_DEFAULTS: ClassVar[dict[str, Any]] = {
        "parallel": "auto",
        "flash_attn": "auto",
        "cache_type_k": "f16",
        "cache_type_v": "f16",
        "cont_batching": True,
        "batch_size": None,
        "ubatch_size": None,
        "spec_type": "none",
        "draft_model": None,
        "draft_max": None,
    }
    binary: Path | None = Field(
        None,
        description="A llama-server executable; default: the one built from the pinned "
        "llama-cpp-python source release (`make llamacpp`).",
    )
    parallel: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        "auto",
        description="Slots served at once (`-np`), continuous batching over them. auto: "
        "llama-server's default (no `-np`): 4 slots sharing one unified KV pool of ctx_size, "
        "each up to the whole context; a number N: N slots of ctx_size/N each.",
    )
    ctx_size: int = Field(
        4096,
        ge=64,
        description="Total context (`-c`), shared by the slots: each gets ctx/parallel (with "
        "parallel auto, one pool any slot may fill).",
    )
    batch_size: int | None = Field(
        None,
        ge=1,
        description="`-b`: logical batch, the most prompt tokens one step takes in (default "
        "2048). Larger: faster prefill of long prompts, more compute buffer memory.",
    )
    ubatch_size: int | None = Field(
        None,
        ge=1,
        description="`-ub`: physical micro-batch the kernels run at once (default 512, at most "
        "batch_size). Trades prefill speed against the compute buffer's memory.",
    )
    cache_type_k: KvType = Field(
        "f16",
        description="`-ctk`: K-cache type. q8_0 halves and q4_0 quarters the K cache (more slots "
        "or context in the same memory) at a small accuracy cost.",
    )
    cache_type_v: KvType = Field(
        "f16",
        description="`-ctv`: V-cache type; a quantized V cache needs flash_attn on (llama.cpp "
        "refuses it otherwise).",
    )
    cont_batching: bool = Field(
        True,
        description="`-cb`/`-nocb`: continuous batching, new requests join running slots at once. "
        "Off: a slot's batch runs to its end before others start.",
    )
    spec_type: Literal["none", "draft-simple", "ngram-simple", "ngram-mod", "ngram-cache"] = Field(
        "none",
        description="`--spec-type`: speculative decoding. draft-simple drafts with draft_model; "
        "the n-gram kinds draft from the text already seen (no second model, helps repetitive "
        "output). The acceptance rate is in the server's /metrics and timings.",
    )
    draft_model: Path | None = Field(
        None,
        description="`-md`: a smaller GGUF of the same model (same vocabulary) to draft with, "
        "e.g. the Q4_K_M variant drafting for F16 or Q8_0; sets spec_type draft-simple when "
        "spec_type is none. Costs its weights and KV cache in memory.",
    )
    draft_max: int | None = Field(
        None, ge=1, description="`--spec-draft-n-max`: tokens drafted per step (default 3)."
    )
    device: DeviceSetting = Field("auto", description=f"{DEVICE_HELP} Sets `-ngl`.")
    n_gpu_layers: Annotated[int, Field(ge=0)] | Literal["all"] = Field(
        "all",
        description="Layers offloaded to the GPU (`-ngl`, and a draft model's `-ngld`). all: on "
        "a GPU every layer (`-ngl all`, the output layer included), on a CPU none (`-ngl 0`); a "
        "number N: `-ngl N` as given, the other layers computed on the CPU (their weights and KV "
        "cache in host memory).",
    )
    flash_attn: Literal["on", "off", "auto"] = Field(
        "off",
        description="`-fa`. Off by default: with this release on CPU, llama-server's default "
        "(auto -> on) made SmolLM2 answer garbage ('L'Étoile, la Marseillaise' for the capital "
        "of France) where -fa off answers 'Paris'. Off on a GPU too until measured there: the CUDA "
        "build's flash-attention kernels are another code path (auto turns them on), 'on' is "
        "worth sweeping there (less KV memory traffic; a quantized V cache needs it), and the "
        "served answers' fidelity check says whether they answer as the reference does.",
    )

    @property
    def slots(self) -> int:
        """The slots the server runs: `parallel`, or llama-server's own choice for auto."""
        return AUTO_SLOTS if self.parallel == "auto" else self.parallel

    @model_validator(mode="after")
    def _quantized_v_needs_flash_attention(self) -> LlamaCppSettings:
        if self.cache_type_v not in FLOAT_KV and self.flash_attn != "on":
            raise ValueError(
                f"cache_type_v {self.cache_type_v} needs flash_attn: on (llama.cpp quantizes the "
                "V cache only with flash attention); set flash_attn: on or cache_type_v: f16"
            )
        ub, b = self.ubatch_size, self.batch_size
        if ub is not None and b is not None and ub > b:
            raise ValueError(
                f"ubatch_size {ub} is above batch_size {b}: the micro-batch is a part of the batch"
            )
        if self.spec_type == "draft-simple" and self.draft_model is None:
            raise ValueError("spec_type draft-simple needs draft_model (a smaller GGUF)")
        return self


def gpu_layers(settings: LlamaCppSettings, device: str) -> str:
    """``-ngl``'s value on ``device`` (resolved): ``all`` every layer on a GPU, none on a CPU; a
    number as given."""
    if settings.n_gpu_layers == "all":
        return "all" if device == "cuda" else "0"
    return str(settings.n_gpu_layers)


@dataclass(frozen=True)
class LayerSplit:
    """Where a GGUF's weights and KV cache are with ``-ngl``: bytes on the GPU and on the CPU,
    and the part of the layers (so of the KV cache) on the GPU."""

    gpu_bytes: int
    cpu_bytes: int
    kv_on_gpu: float


def layer_split(gguf: Path, n_gpu_layers: int | str) -> LayerSplit:
    """On a GPU, as llama.cpp places them: the last ``-ngl`` of the ``block_count`` repeating
    layers on the GPU, the output layer too where ``-ngl`` exceeds them (``all``), the token
    embeddings always on the CPU (the input layer; a tied output layer gets its own copy on the
    GPU)."""

    header = read_header(gguf)
    total = sum(t.n_bytes for t in header.tensors)
    layers = int(header.hparam("block_count"))
    offloaded = layers + 1 if n_gpu_layers == "all" else int(n_gpu_layers)
    first_on_gpu = layers - min(offloaded, layers)
    embeddings = next((t.n_bytes for t in header.tensors if t.name == "token_embd.weight"), 0)
    tied = not any(t.name == "output.weight" for t in header.tensors)
    gpu = 0
    for t in header.tensors:
        if t.name.startswith("blk."):
            on_gpu = int(t.name.split(".")[1]) >= first_on_gpu
        else:
            on_gpu = t.name.startswith("output") and offloaded > layers
        gpu += t.n_bytes if on_gpu else 0
    if tied and offloaded > layers:
        gpu += embeddings  # the output layer's copy of the embeddings
    cpu = total - gpu + (embeddings if tied and offloaded > layers else 0)
    return LayerSplit(gpu, cpu, min(offloaded, layers) / layers if layers else 1.0)


def _slot_dir() -> Path:
    path = Path(".cache/llama-slots").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


class LlamaCppEngine(Engine):
    name: ClassVar[str] = "llamacpp"
    formats: ClassVar[frozenset[str]] = frozenset({"gguf"})
    full_sweep: ClassVar[dict[str, list[Any]]] = {
        "parallel": ["auto", 8, 2, 1],
        "cache_type_k": ["f16", "q8_0"],
    }
    # on a GPU: more slots (a GPU's batch is nearly free up to dozens), and its flash-attention
    # kernels, off by default until measured there (flash_attn)
    full_sweep_gpu: ClassVar[dict[str, list[Any]] | None] = {
        "parallel": ["auto", 32, 8],
        "flash_attn": ["off", "on"],
    }
    server: ClassVar[str] = (
        "native `llama-server` built from the pinned llama-cpp-python source release (the GGUF stage's llama.cpp)"
    )
    metrics_path: ClassVar[str | None] = "/metrics"
    settings_model: ClassVar[type[EngineSettings]] = LlamaCppSettings
    startup_estimate_s: ClassVar[float] = (
        1.0  # 0.5 s measured for llama-server on the embedded GGUFs
    )
    profile: ClassVar[RequestProfile] = RequestProfile(
        "llamacpp", {"stream_options": {"include_usage": True}}, ("ignore_eos",)
    )
    aliases: ClassVar[tuple[str, ...]] = ("llama.cpp",)
    # the Prometheus endpoint the memory and queue figures are read from, and the slot folder
    # that lets the bench empty the prompt cache between points (see launch)
    harness_args: ClassVar[dict[str, int]] = {"--metrics": 0, "--slot-save-path": 1}

    def model_name_in(self, argv: list[str]) -> str | None:
        return argv[argv.index("--alias") + 1] if "--alias" in argv[:-1] else None

    def estimate_preference(self, device_kind: str) -> int:
        return 1

    def kernel_efficiency(self, device_kind: str) -> KernelEfficiency | None:
        return CPU_KERNELS if device_kind == "cpu" else None

    def _binary(self, settings: LlamaCppSettings) -> str:
        if settings.binary is None:
            tc = llama_build.toolchain()
            binary = tc.binary("llama-server")
            if binary.is_file():
                # a build made for another CPU may fault here: refuse it
                llama_build.check_build(tc)
        else:
            binary = settings.binary
        if not binary.is_file():
            raise UserError(
                f"engines.llamacpp.binary: {binary} does not exist; run `make llamacpp` "
                "to build llama-server from the pinned source release"
            )
        return str(binary.resolve())

    def launch(
        self, artifact: Artifact, settings: LlamaCppSettings, host: str, port: int
    ) -> LaunchSpec:
        argv = [self._binary(settings), "-m", str(artifact.weights.resolve())]
        argv += ["--host", host, "--port", str(port), "--alias", artifact.name]
        if settings.parallel != "auto":
            argv += ["-np", str(settings.parallel)]
        argv += ["-c", str(settings.ctx_size)]
        argv += ["-t", str(settings.threads), "-tb", str(settings.threads)]
        device = serving_device(self.name, settings.device)
        # --jinja: render chats with the model's own template (as transformers and vLLM do), not
        # llama.cpp's built-in approximation of it.
        argv += ["-ngl", gpu_layers(settings, device), "--metrics", "--no-webui", "--jinja"]
        argv += ["-fa", settings.flash_attn]
        # slot actions answer 501 without a save path, the erase the bench sends before each
        # load point (reset_prefix_cache) included: every point then started from the previous
        # one's cached prompts. Nothing is saved there; erase only empties a slot's cache.
        argv += ["--slot-save-path", str(_slot_dir())]
        if settings.batch_size is not None:
            argv += ["-b", str(settings.batch_size)]
        if settings.ubatch_size is not None:
            argv += ["-ub", str(settings.ubatch_size)]
        if (settings.cache_type_k, settings.cache_type_v) != ("f16", "f16"):
            argv += ["-ctk", settings.cache_type_k, "-ctv", settings.cache_type_v]
        if not settings.cont_batching:
            argv.append("-nocb")
        spec = settings.spec_type
        if settings.draft_model is not None:
            spec = "draft-simple" if spec == "none" else spec
            argv += ["-md", str(settings.draft_model.resolve())]
            argv += ["-td", str(settings.threads), "-tbd", str(settings.threads)]
            if device == "cuda":  # its layers follow the model's (llama.cpp's default: fitted)
                argv += ["-ngld", gpu_layers(settings, device)]
        if spec != "none":
            argv += ["--spec-type", spec]
        if settings.draft_max is not None:
            argv += ["--spec-draft-n-max", str(settings.draft_max)]
        argv += settings.extra_args
        return self.launch_spec(argv, settings, host, port, artifact.name, artifact=artifact)

    def memory_needs(self, artifact: Artifact, settings: LlamaCppSettings) -> tuple[Need, ...]:
        """The GGUF (and a draft's), and the KV cache its context holds in its cache types: on a
        CPU all of it, on a GPU the part of the layers left on the CPU (none with all)."""
        return self._held(artifact, settings, on_gpu=False)

    def gpu_memory_needs(self, artifact: Artifact, settings: LlamaCppSettings) -> GpuNeeds | None:
        """On a GPU, the offloaded layers' share of the weights and KV cache, split over every
        GPU found (llama.cpp's default split by layers)."""
        if intended_device(settings.device) != "cuda":
            return None
        count = max(1, len(gpus()))
        needs = tuple(
            (-(-n // count), what) for n, what in self._held(artifact, settings, on_gpu=True)
        )
        return GpuNeeds(
            needs,
            gpus=tuple(range(count)),
            fix="lower engines.llamacpp.n_gpu_layers (the other layers run on the CPU), "
            "ctx_size or the cache types, or serve a smaller variant",
        )

    def _held(
        self, artifact: Artifact, settings: LlamaCppSettings, *, on_gpu: bool
    ) -> tuple[Need, ...]:
        """What the layers on the GPU (``on_gpu``) or on the CPU hold: the model's (and a
        draft's) weights there, and the KV cache of those layers (:func:`layer_split`)."""
        cuda = intended_device(settings.device) == "cuda"
        needs: list[Need] = []
        types = (settings.cache_type_k, settings.cache_type_v)
        for role, model in (("", artifact.weights), ("draft ", settings.draft_model)):
            if model is None or not Path(model).is_file():
                continue
            size = Path(model).stat().st_size
            split = LayerSplit(0, size, 0.0)  # on a CPU: the whole file, as it is mapped
            if cuda:
                try:
                    split = layer_split(Path(model), settings.n_gpu_layers)
                except (KeyError, IndexError, ValueError, OSError, UserError):
                    continue  # a table it cannot read: where its bytes go is not known
            weights = split.gpu_bytes if on_gpu else split.cpu_bytes
            kv_part = split.kv_on_gpu if on_gpu else 1.0 - split.kv_on_gpu
            where = "" if not cuda else f" (n_gpu_layers {settings.n_gpu_layers})"
            if cuda and not on_gpu:
                where = f" left on the CPU{where}"  # the token embeddings at the least
            if weights:
                needs.append((weights, f"{role}weights{where}"))
            if kv_part <= 0:
                continue
            try:
                per_token = gguf_kv_bytes_per_token(Path(model), *types)
            except (KeyError, IndexError, ValueError, OSError):
                continue  # metadata it cannot read: the weights alone are still a lower bound
            needs.append(
                (int(settings.ctx_size * per_token * kv_part),
                 f"{role}KV cache (ctx_size {settings.ctx_size}, {'/'.join(types)}){where}")
            )  # fmt: skip
        return tuple(needs)

    def version(self, settings: LlamaCppSettings) -> str:
        out = subprocess.run(
            [self._binary(settings), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        text = (out.stdout + out.stderr).strip().splitlines()
        return next((line for line in text if "version" in line), text[0] if text else "unknown")

    def kernels(self, settings: LlamaCppSettings) -> dict[str, BaseModel | None]:
        # the pinned build's, enabled or not (the GGUF format's quantizer and quality backend
        # run it too): whether it fits this CPU, and the ISA probe's verdicts it was built by
        info = llama_build.build_info(llama_build.toolchain())
        isa = (info or {}).get("isa") or {}
        return {
            "llama_cpp": LlamaCppKernels(
                build_fits_this_machine=llama_build.mismatch(info) is None,
                cmake_flags=(info or {}).get("cmake_flags"),
                isa_kept=isa.get("kept"),
                isa_dropped=isa.get("dropped"),
                isa_outcomes=isa.get("outcomes"),
                march=isa.get("arch"),
            )
        }

    def reset_prefix_cache(self, base_url: str, settings: LlamaCppSettings) -> str:
        statuses = [
            self.post(f"{base_url}/slots/{slot}?action=erase") for slot in range(settings.slots)
        ]
        bad = [s for s in statuses if s != 200]
        return "reset" if not bad else f"POST /slots/N?action=erase answered {bad[0]}"

    def context_limit(self, settings: LlamaCppSettings) -> tuple[int, str] | None:
        if settings.parallel == "auto":  # one unified pool: a request may use all of it
            return settings.ctx_size, f"engines.llamacpp ctx_size {settings.ctx_size}"
        per_slot = settings.ctx_size // settings.parallel
        return per_slot, (
            f"engines.llamacpp ctx_size {settings.ctx_size} / parallel {settings.parallel}"
        )

    def max_batch(self, settings: LlamaCppSettings) -> int | None:
        return settings.slots

    def prefix_caching(self, settings: LlamaCppSettings) -> bool:
        # llama-server keeps each slot's last prompt and answer (cache_prompt defaults to true)
        # and sends a request to the slot whose cache shares most of its prompt.
        return True

    def prefix_cache_conversations(self, settings: LlamaCppSettings) -> int | None:
        # each slot keeps its own last prompt and answer: with one slot and four multi-turn
        # clients the default run's records show only the shared system prompt cached (83 of
        # 151 tokens), against 124 with four slots
        return settings.slots

    def suggest_sweep(
        self, centre: int, kv_capacity: int, input_len: int, output_len: int
    ) -> dict[str, list[Any]]:
        parallel = [p for p in (1 << i for i in range(12)) if p <= centre and p <= kv_capacity]
        parallel = parallel or [1]
        request = input_len + output_len
        ctx = -(-max(parallel) * request // CONTEXT_ROUNDING) * CONTEXT_ROUNDING
        return {"parallel": parallel, "ctx_size": [ctx]}


register_engine(LlamaCppEngine())
