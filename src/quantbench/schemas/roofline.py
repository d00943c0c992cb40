"""The estimator's results as the estimate stage's file holds them (``schemas.estimate``): the
model's shape, the weights' bytes, the figures at each concurrency, a pair's prediction, an
estimate set against a measurement.

The estimator (:mod:`quantbench.estimate`) computes them; the models are here, below both the
schemas that store them and the estimator, so the schemas import nothing from the estimator.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from quantbench.schemas.estimate_inputs import EstimatedVariant, EstimateWorkload, SloSpec
from quantbench.schemas.hardware import CpuMeasurement

TensorRole = Literal[
    "token_embd",
    "output",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
]


class WeightTensor(BaseModel):
    """One weight matrix, named by its role (GGUF vocabulary) and shaped (rows, cols).

    ``cols`` is the input dimension (the contiguous one, GGUF ``ne[0]``), which is what block
    quantisation groups run along.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: TensorRole
    layer: int | None = Field(description="decoder layer index; None for embedding and head")
    rows: int = Field(gt=0, description="output features")
    cols: int = Field(gt=0, description="input features (block-quantisation axis)")

    @property
    def elements(self) -> int:
        return self.rows * self.cols


class ModelShape(BaseModel):
    """The architecture facts that set FLOPs and bytes, read from ``config.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_type: str
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool
    gated_mlp: bool
    max_position_embeddings: int | None = None
    dtype: str = Field(default="bfloat16", description="torch dtype the checkpoint is stored in")
    quantization_config: dict[str, Any] | None = Field(
        default=None, description="the config's quantization_config, when it has one"
    )
    notes: tuple[str, ...] = Field(default=(), description="defaults filled in while reading")

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_tensors(self, layer: int) -> list[WeightTensor]:
        """The weight matrices of one decoder layer."""
        h, inter = self.hidden_size, self.intermediate_size
        tensors = [
            WeightTensor(role="attn_q", layer=layer, rows=self.q_dim, cols=h),
            WeightTensor(role="attn_k", layer=layer, rows=self.kv_dim, cols=h),
            WeightTensor(role="attn_v", layer=layer, rows=self.kv_dim, cols=h),
            WeightTensor(role="attn_output", layer=layer, rows=h, cols=self.q_dim),
            WeightTensor(role="ffn_up", layer=layer, rows=inter, cols=h),
            WeightTensor(role="ffn_down", layer=layer, rows=h, cols=inter),
        ]
        if self.gated_mlp:
            tensors.insert(4, WeightTensor(role="ffn_gate", layer=layer, rows=inter, cols=h))
        return tensors

    def weight_tensors(self) -> list[WeightTensor]:
        """Every weight matrix: embedding, all layers, and the head unless it is tied."""
        tensors = [
            WeightTensor(role="token_embd", layer=None, rows=self.vocab_size, cols=self.hidden_size)
        ]
        for layer in range(self.num_layers):
            tensors.extend(self.layer_tensors(layer))
        if not self.tie_word_embeddings:
            tensors.append(
                WeightTensor(role="output", layer=None, rows=self.vocab_size, cols=self.hidden_size)
            )
        return tensors

    def streamed_shape_shares(self) -> dict[tuple[int, int], float]:
        """Share of the weights a step streams, by matrix shape (rows, cols).

        Matrix-vector kernels stream small or short-rowed matrices more slowly on some
        machines; this lets a rate measured per shape be weighted by what the model reads.
        """
        counts: dict[tuple[int, int], float] = {}
        for tensor in self.weight_tensors():
            if tensor.role == "token_embd" and not self.tie_word_embeddings:
                continue  # gathered row by row, not streamed
            shape = (tensor.rows, tensor.cols)
            counts[shape] = counts.get(shape, 0.0) + tensor.elements
        total = sum(counts.values())
        return {shape: n / total for shape, n in sorted(counts.items())}

    @property
    def layer_matmul_params(self) -> int:
        """Weights multiplied per token in one decoder layer (attention + MLP projections)."""
        return sum(t.elements for t in self.layer_tensors(0))

    @property
    def body_matmul_params(self) -> int:
        """Weights multiplied per token in all decoder layers."""
        return self.num_layers * self.layer_matmul_params

    @property
    def head_params(self) -> int:
        """Weights of the output projection (the embedding matrix itself when tied)."""
        return self.vocab_size * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def norm_params(self) -> int:
        """RMSNorm/LayerNorm weights: two per layer plus the final one (biases ignored)."""
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def total_params(self) -> int:
        """Parameter count as a checkpoint stores it (tied head counted once)."""
        head = 0 if self.tie_word_embeddings else self.head_params
        return self.embedding_params + self.body_matmul_params + head + self.norm_params

    @property
    def kv_elements_per_token(self) -> int:
        """K and V elements cached per token across all layers (grouped-query aware)."""
        return 2 * self.num_layers * self.kv_dim


Bound = Literal["compute", "memory"]


class PhaseEstimate(BaseModel):
    """One phase for a single request (concurrency 1)."""

    model_config = ConfigDict(extra="forbid")

    flops: float = Field(description="per prompt (prefill) or per decode step, mean over output")
    bytes: float
    intensity: float = Field(description="FLOPs per byte")
    bound: Bound
    time_ms: float


class ConcurrencyPoint(BaseModel):
    """Estimated steady-state figures at one concurrency."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int
    ttft_ms: float
    itl_ms: float | None = Field(description="mean over the output (= TPOT); None if O == 1")
    itl_first_ms: float | None = Field(description="first decode step (shortest context)")
    itl_last_ms: float | None = Field(description="last decode step (longest context)")
    itl_decode_only_ms: float | None = Field(description="mean ITL without prompts mixed in")
    e2e_s: float
    output_tps: float = Field(description="output tokens per second, all requests")
    input_tps: float
    request_rate: float = Field(description="requests per second")
    running: int | None = Field(
        None, description="requests the engine runs at once (the rest wait in its queue)"
    )
    queue_wait_ms: float = Field(0.0, description="mean wait in the engine's queue, in TTFT")
    decode_bound: Bound | None
    decode_intensity: float | None
    kv_cache_gb: float = Field(description="KV cache the running requests hold at most")
    fits_memory: bool
    meets_ttft_slo: bool
    meets_itl_slo: bool


class ConcurrencyLimits(BaseModel):
    """The three limits on concurrency, and the one that binds."""

    model_config = ConfigDict(extra="forbid")

    kv_memory: int = Field(description="requests whose full KV cache fits beside the weights")
    prefill_compute: int = Field(description="largest concurrency with estimated TTFT <= SLO")
    decode: int = Field(description="largest concurrency with estimated ITL <= SLO")
    overall: int
    binding: str = Field(description="which limit is the smallest")
    decode_compute_bound_from: int | None = Field(
        description="concurrency from which a decode step turns compute-bound (None: never)"
    )


class SuggestedGrids(BaseModel):
    """Client load points and per-engine server settings to sweep."""

    model_config = ConfigDict(extra="forbid")

    concurrency: list[int] = Field(description="client concurrency levels to load-test")
    engines: dict[str, dict[str, list[Any]]] = Field(
        description="per engine: setting -> values, ready for params.yaml"
    )
    rationale: list[str]


class WeightBytes(BaseModel):
    """Memory footprint and per-step traffic of a variant's weights."""

    model_config = ConfigDict(extra="forbid")

    stored_bytes: float = Field(ge=0, description="resident weight bytes")
    streamed_bytes: float = Field(ge=0, description="bytes read once per forward step")
    gathered_bytes_per_token: float = Field(ge=0, description="embedding row per input token")
    weight_count: int = Field(gt=0, description="logical weights (matrices and norms)")
    compute_dtype: str = Field(description="dtype the matmuls run in (hardware table key)")
    source: str = Field(description="'file' (read from the artefact) or 'nominal' (tables)")
    detail: str = Field(description="the file read, or the rule used")
    bytes_by_type: dict[str, float] = Field(
        default_factory=dict, description="stored bytes per tensor type"
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def bits_per_weight(self) -> float:
        """Stored bits over logical weights (embedding and norms included)."""
        return self.stored_bytes * 8 / self.weight_count


class HardwareUsed(BaseModel):
    """The device figures an estimate used, efficiencies applied."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str
    source: str
    memory_gb: float
    compute_dtype: str
    peak_tflops: float
    compute_efficiency: float
    peak_bandwidth_gbs: float
    bandwidth_efficiency: float
    step_overhead_ms: float
    peak_ops_per_byte: float = Field(description="datasheet ridge point")
    ops_per_byte: float = Field(description="ridge point after efficiencies")
    measurement: CpuMeasurement | None = None


class KvCacheUsed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dtype: str
    bytes_per_token: float


class EstimateResult(BaseModel):
    """Everything ``quantbench estimate`` reports for one variant on one device."""

    model_config = ConfigDict(extra="forbid")

    model: str
    architecture: ModelShape
    variant: EstimatedVariant
    engine: str = Field(description="engine whose per-step overhead is included ('none': none)")
    weights: WeightBytes
    kv_cache: KvCacheUsed
    hardware: HardwareUsed
    workload: EstimateWorkload
    slo: SloSpec
    memory_utilization: float
    prefill: PhaseEstimate
    decode: PhaseEstimate | None
    points: list[ConcurrencyPoint]
    best_latency: ConcurrencyPoint
    best_throughput: ConcurrencyPoint | None = Field(
        description="highest output rate within all three limits; None if none is met"
    )
    limits: ConcurrencyLimits
    grids: SuggestedGrids
    notes: list[str]


class PairPrediction(BaseModel):
    """The estimate for one pair, server setting and workload, at each concurrency."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pair: str
    variant: str
    engine: str
    server_point: str = Field(description="the setting's label, as the bench names it")
    workload: str
    hardware_name: str
    max_batch: int | None = Field(description="requests the engine runs at once (None: all)")
    input_len: int
    output_len: int
    points: list[ConcurrencyPoint]

    def at(self, concurrency: int) -> ConcurrencyPoint | None:
        return next((p for p in self.points if p.concurrency == concurrency), None)


class ComparisonRow(BaseModel):
    """Estimate and measurement at one point; ratios > 1 mean the estimate was optimistic."""

    model_config = ConfigDict(extra="forbid")

    variant: str
    engine: str
    hardware: str
    setting: str | None
    concurrency: int
    proxy: bool
    estimated_ttft_ms: float
    measured_ttft_ms: float | None
    ttft_ratio: float | None = Field(description="measured / estimated")
    estimated_tpot_ms: float | None
    measured_tpot_ms: float | None
    tpot_ratio: float | None = Field(description="measured / estimated")
    estimated_output_tps: float
    measured_output_tps: float | None
    output_tps_ratio: float | None = Field(description="estimated / measured")
    within_2x: bool


class FittedEfficiency(BaseModel):
    """Effective figures that would make the roofline reproduce a set of measurements."""

    model_config = ConfigDict(extra="forbid")

    variant: str
    engine: str
    hardware: str
    decode_points: int
    effective_bandwidth_gbs: float | None
    bandwidth_efficiency: float | None = Field(description="of the peak (GPU) or copy (CPU)")
    step_overhead_ms: float | None
    prefill_points: int
    effective_tflops: float | None
    compute_efficiency: float | None
    explanation: str
