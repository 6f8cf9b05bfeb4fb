"""The ``ShardedProjectionExperiment`` spec (group ``bench.spx.dev``, version ``v1alpha1``).

The same model validates a file given to ``spx run`` and the object the operator reconciles, so an
invalid experiment is rejected before anything reaches a GPU. Field defaults describe the motivating
case: DeepSeek-V4.1's ``fused_wqa_wkv`` projection (hidden 5120 → 1280 + 512) at TP8 on Hopper.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from spx.api.accuracy import AccuracySpec
from spx.api.base import CamelModel
from spx.api.serving import ServingSpec

GROUP = "bench.spx.dev"
VERSION = "v1alpha1"
KIND: Final = "ShardedProjectionExperiment"
PLURAL = "shardedprojectionexperiments"
SINGULAR = "shardedprojectionexperiment"
SHORT_NAMES = ["spx"]
API_VERSION: Final = "bench.spx.dev/v1alpha1"

#: vLLM ≥ 0.33 ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` (``vllm/models/deepseek_v41/attention.py``).
VLLM_DEFAULT_THRESHOLD_TOKENS = 2048

#: The seed PR's token sweep (``../shared/data/h20_tp8_fused_wqa_wkv.csv``).
SEED_TOKENS = [6, 12, 24, 48, 96, 384, 1024, 2048, 4096, 8192, 16384]

WeightFormat = Literal["fp8-block128-ue8m0", "bf16"]
ActivationDtype = Literal["bfloat16", "float16", "float32"]
GemmBackend = Literal["auto", "torch-bf16", "torch-fp8", "vllm"]
GatherBackend = Literal["auto", "nccl", "gloo", "vllm", "modelled"]
Timer = Literal["auto", "cupti", "cuda-events", "host"]
Device = Literal["auto", "cuda", "cpu"]
ThresholdRounding = Literal["next-power-of-two", "next-multiple-of-tp", "none"]

#: Block edge of the FP8 block-scaled weight format (DeepSeek-V3/V4 checkpoints: 128×128 blocks).
FP8_BLOCK = 128


class ProjectionSpec(CamelModel):
    """The projection under test: ``Y[M, N] = X[M, K] · Wᵀ`` with ``K = hidden_size``, ``N = sum(output_sizes)``.

    ``output_sizes`` are the merged column blocks (``fused_wqa_wkv``: q_a 1280 + kv 512 = 1792).
    With ``weight_format = fp8-block128-ue8m0`` the weight is FP8 e4m3 in 128×128 blocks with one
    power-of-two (UE8M0) scale per block, as DeepSeek-V4.1 checkpoints store it; K and every output
    size must then be multiples of 128.
    """

    name: str = Field(default="fused_wqa_wkv", min_length=1, max_length=63)
    """Name of the projection in reports and metrics (default fused_wqa_wkv)."""
    hidden_size: int = Field(default=5120, gt=0, le=65536)
    """K, the input width (hidden size) of the projection."""
    output_sizes: list[Annotated[int, Field(gt=0, le=65536)]] = Field(
        default_factory=lambda: [1280, 512], min_length=1, max_length=16
    )
    """The merged output column blocks; N is their sum (fused_wqa_wkv: q_a 1280 + kv 512)."""
    weight_format: WeightFormat = "fp8-block128-ue8m0"
    """Weight storage: fp8-block128-ue8m0 (FP8 e4m3, one power-of-two scale per 128×128 block; K and every output size multiples of 128) or bf16."""
    activation_dtype: ActivationDtype = "bfloat16"
    """dtype of the activations X and the output Y."""

    @field_validator("output_sizes")
    @classmethod
    def _positive_outputs(cls, v: list[int]) -> list[int]:
        bad = [n for n in v if n <= 0]
        if bad:
            raise ValueError(f"every output size must be > 0, got {bad}")
        return v

    @model_validator(mode="after")
    def _block_aligned(self) -> ProjectionSpec:
        if self.weight_format == "fp8-block128-ue8m0":
            if self.hidden_size % FP8_BLOCK:
                raise ValueError(
                    f"hiddenSize={self.hidden_size} is not a multiple of {FP8_BLOCK}, the block size of "
                    f"weightFormat fp8-block128-ue8m0; use a multiple of {FP8_BLOCK} or weightFormat bf16"
                )
            bad = [n for n in self.output_sizes if n % FP8_BLOCK]
            if bad:
                raise ValueError(
                    f"outputSizes {bad} are not multiples of {FP8_BLOCK}, the block size of weightFormat "
                    f"fp8-block128-ue8m0; use multiples of {FP8_BLOCK} or weightFormat bf16"
                )
        return self

    @property
    def output_size(self) -> int:
        """N, the merged output width (sum of ``output_sizes``)."""
        return sum(self.output_sizes)


class ParallelismSpec(CamelModel):
    """Tensor parallelism: the number of ranks the token dimension is split over."""

    tensor_parallel_size: int = Field(default=8, ge=1, le=64)
    """TP, the number of ranks; the split candidate gives each rank ceil(M/TP) token rows, then all-gathers the output."""


class SweepSpec(CamelModel):
    """Token counts (M, tokens in the batch) to measure, strictly increasing."""

    tokens: list[Annotated[int, Field(gt=0, le=1 << 24)]] = Field(
        default_factory=lambda: list(SEED_TOKENS), min_length=1, max_length=64
    )
    """Token counts M to measure, strictly increasing, each at most 16,777,216."""

    @field_validator("tokens")
    @classmethod
    def _sorted_positive_unique(cls, v: list[int]) -> list[int]:
        bad = [t for t in v if t <= 0]
        if bad:
            raise ValueError(f"token counts must be > 0, got {bad}")
        dupes = sorted({t for t in v if v.count(t) > 1})
        if dupes:
            raise ValueError(f"token counts must be unique, {dupes} repeat; list each count once")
        if v != sorted(v):
            raise ValueError(f"token counts must be in increasing order, got {v}; use {sorted(v)}")
        return v


class GatherModelSpec(CamelModel):
    """Parameters of the modelled all-gather, used when fewer GPUs than TP are present.

    ``t_gather(M) = latency_us + (TP − 1)/TP · bytes(M, N) / bus_bandwidth`` (the nccl-tests
    ``busbw`` convention, NVIDIA/nccl-tests ``doc/PERFORMANCE.md``), ``bytes`` = the gathered output
    ``[M_padded, N]`` in the activation dtype.

    Defaults for NVLink4 (H100/H200 SXM): NVIDIA's H100/H200 datasheets give 900 GB/s bidirectional
    NVLink per GPU, i.e. 450 GB/s per direction; nccl-tests all-gather on 8×H100 SXM typically reaches
    about 80% of that as bus bandwidth, hence 360 GB/s. The 10 µs latency is the order of an 8-rank
    NCCL LL-protocol all-gather of a few KiB over NVLink. Both are priors to be replaced by a fit to
    a measured gather sweep (``spx`` issue "Measure the crossover on 8× H200").
    """

    latency_us: float = Field(default=10.0, ge=0.0, le=10_000.0)
    """Fixed latency of one all-gather in µs (default 10: an 8-rank NCCL LL all-gather of a few KiB over NVLink)."""
    bus_bandwidth_gbps: float = Field(default=360.0, gt=0.0, le=10_000.0)
    """Bus bandwidth in GB/s, nccl-tests busbw convention (default 360: ~80% of NVLink4's 450 GB/s per direction)."""

    def gather_us(self, padded_tokens: int, output_size: int, dtype_bytes: int, tensor_parallel_size: int) -> float:
        """Modelled all-gather time in µs of a ``[padded_tokens, output_size]`` output over TP ranks.

        ``latency_us + (TP − 1)/TP · padded_tokens · output_size · dtype_bytes / bus_bandwidth``;
        ``bus_bandwidth_gbps`` is in GB/s (10⁹ B/s). Zero for TP = 1 (nothing to gather).
        """
        tp = tensor_parallel_size
        if tp <= 1:
            return 0.0
        total_bytes = padded_tokens * output_size * dtype_bytes
        return self.latency_us + (tp - 1) / tp * total_bytes / (self.bus_bandwidth_gbps * 1e9) * 1e6


class KernelSpec(CamelModel):
    """How the kernel microbenchmark measures (method: DESIGN.md "The kernel benchmark method")."""

    gemm_backend: GemmBackend = "auto"
    """GEMM implementation: auto (the one vLLM runs where available), torch-bf16, torch-fp8 or vllm."""
    gather: GatherBackend = "auto"
    """All-gather implementation: auto, nccl, gloo (CPU), vllm (vLLM's custom all-reduce path) or modelled."""
    device: Device = "auto"
    """Device to measure on: auto, cuda or cpu (cpu only proves the pipeline works)."""
    samples: int = Field(default=50, ge=5, le=10_000)
    """Timed samples per candidate and token count; the median is reported."""
    warmup: int = Field(default=5, ge=0, le=1_000)
    """Untimed calls before sampling."""
    l2_flush: bool = True
    """Flush the GPU L2 cache before every sample, so weights are read from HBM as in a model's forward pass."""
    timer: Timer = "auto"
    """Timer: auto, cupti (kernel spans from the profiler), cuda-events or host."""
    cuda_graphs: bool = True
    """Capture each candidate in a CUDA graph and time the replays (no launch overhead), as vLLM runs decode."""
    gather_model: GatherModelSpec = Field(default_factory=GatherModelSpec)
    """Parameters of the modelled all-gather, used when fewer GPUs than TP are present."""
    seed: int = Field(default=0, ge=0)
    """Seed of the random inputs and weights."""


class GateSpec(CamelModel):
    """What a rollout needs from the measurement.

    ``threshold_tokens`` is the deployed (or proposed) ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS``; the gate
    passes when the split candidate wins by at least ``min_speedup_at_or_above_threshold`` at every
    measured token count ≥ the threshold, and the split output matches the replicated one within
    ``max_abs_error``. A speed verdict that rests on a modelled gather, or on a CPU smoke run's
    timings, is reported as ``Inconclusive`` unless ``allow_modelled_gather`` /
    ``allow_cpu_timings`` is true (the latter exists for pipeline tests on machines without GPUs).
    """

    threshold_tokens: StrictInt = Field(default=VLLM_DEFAULT_THRESHOLD_TOKENS, gt=0, le=1 << 24)
    """The deployed or proposed _SHARD_FUSED_WQA_WKV_MIN_TOKENS (vLLM's default 2048) the gate judges."""
    min_speedup_at_or_above_threshold: float = Field(default=1.0, gt=0.0, le=100.0)
    """Smallest speedup (replicated / split time) the split must reach at every measured token count ≥ thresholdTokens."""
    max_abs_error: float = Field(default=0.05, ge=0.0)
    """Largest allowed max |split − replicated| over the outputs."""
    allow_modelled_gather: bool = False
    """Allow a Pass or Fail on speed that rests on a modelled all-gather (otherwise Inconclusive)."""
    allow_cpu_timings: bool = False
    """Allow a Pass or Fail on CPU timings (for pipeline tests on machines without GPUs; otherwise Inconclusive)."""
    threshold_rounding: ThresholdRounding = "next-power-of-two"
    """How the recommended threshold is rounded up from the crossover: next-power-of-two, next-multiple-of-tp or none."""


#: Kubernetes label value (apimachinery ``IsValidLabelValue``): ≤ 63 chars, alphanumeric ends.
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: Qualified name of a label key (``IsQualifiedName``): optional DNS-subdomain prefix + "/" + name.
LABEL_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
#: DNS-1123 subdomain (object names: PriorityClass, PVC, experiments).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: Kubernetes resource quantity (``resource.Quantity``), e.g. ``32``, ``500m``, ``128Gi``.
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"

LabelValue = Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_VALUE)]


class ResourcesSpec(CamelModel):
    """Where the bench pod may run and what it reserves (Kubernetes only; ignored by ``spx run``).

    ``gpu_products`` are values of the ``nvidia.com/gpu.product`` node label (GPU Feature Discovery
    spelling, e.g. ``NVIDIA-H200``). ``cpu``/``memory`` are the bench container's requests (= limits,
    Guaranteed QoS so it is not evicted first and gets exclusive cores under the static CPU manager);
    the memory-backed ``/dev/shm`` counts against ``memory``.
    """

    gpu_products: list[LabelValue] = Field(
        default_factory=lambda: ["NVIDIA-H200", "NVIDIA-H100-80GB-HBM3"], min_length=1, max_length=16
    )
    """Allowed values of the nvidia.com/gpu.product node label (GPU Feature Discovery spelling, e.g. NVIDIA-H200)."""
    node_selector: dict[Annotated[str, Field(max_length=253, pattern=LABEL_KEY)], Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] = Field(
        default_factory=dict, max_length=32
    )
    """Extra node labels the bench pod requires (label keys and values; at most 32)."""
    tolerations: list[dict[str, Any]] = Field(default_factory=list, max_length=32)
    """Tolerations of the bench pod (core/v1 Toleration objects); nvidia.com/gpu NoSchedule is added for GPU runs."""
    cpu: str = Field(default="32", pattern=QUANTITY, max_length=32)
    """CPU request = limit of the bench container (a Kubernetes quantity, e.g. 32 or 500m)."""
    memory: str = Field(default="192Gi", pattern=QUANTITY, max_length=32)
    """Memory request = limit of the bench container (a quantity, e.g. 192Gi); the memory-backed /dev/shm counts against it."""


class SchedulingSpec(CamelModel):
    """Optional Kueue queue and priority class for the bench Job."""

    queue_name: str | None = Field(default=None, min_length=1, max_length=63, pattern=LABEL_VALUE)
    """Kueue LocalQueue to submit the Job to (the Job is created suspended, Kueue admits it)."""
    priority_class_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """PriorityClass of the bench pod."""


class ExperimentSpec(CamelModel):
    """``spec`` of a ``ShardedProjectionExperiment``.

    Raises:
        pydantic.ValidationError: on any invalid field (use :func:`spx.api.load_experiment` for
            a message naming the field path, the bad value and what is allowed).
    """

    projection: ProjectionSpec = Field(default_factory=ProjectionSpec)
    """The projection under test: Y[M, N] = X[M, K]·Wᵀ (default: DeepSeek-V4.1 fused_wqa_wkv, 5120 → 1280 + 512)."""
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    """Tensor parallelism: how many ranks the token dimension is split over."""
    sweep: SweepSpec = Field(default_factory=SweepSpec)
    """Token counts M (tokens in the batch) to measure, strictly increasing."""
    kernel: KernelSpec = Field(default_factory=KernelSpec)
    """How the kernel microbenchmark measures: GEMM and all-gather backends, device, timer, samples."""
    gate: GateSpec = Field(default_factory=GateSpec)
    """What a rollout needs from the measurement: the threshold under test and the speed and error bounds."""
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """Where the bench pod may run and what it reserves (Kubernetes only; spx run ignores it)."""
    image: str | None = Field(default=None, min_length=1)
    """Image of the bench pod; unset: the operator's default (SPX_BENCH_IMAGE)."""
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    """Optional Kueue queue and priority class of the bench Job."""
    timeout_seconds: int = Field(default=3600, ge=60, le=7 * 24 * 3600)
    """Deadline of the whole run in seconds (the Job's activeDeadlineSeconds): kernel bench, then every serving arm and GSM8K."""
    serving: ServingSpec | None = None
    """Optional vLLM serving A/B (split vs main arms) run in the same pod after the kernel bench."""
    accuracy: AccuracySpec | None = None
    """Optional GSM8K accuracy check on the serving arms' servers; needs spec.serving."""

    @model_validator(mode="after")
    def _vllm_benches_fit(self) -> ExperimentSpec:
        """``accuracy`` runs on ``serving``'s servers; the Job deadline must leave every arm its model load.

        ``timeoutSeconds`` is the whole run's deadline (the Job's ``activeDeadlineSeconds``): the
        kernel bench, then one model load per serving arm, its points and GSM8K. It must be at least
        ``len(serving.arms) × serving.startupTimeoutSeconds``, so that no arm that loads within its
        own startup timeout is killed by the deadline (defaults: 4 × 2400 s = 9600 s; plan 3–4 h,
        ``docs/serving.md``).
        """
        if self.accuracy is not None and self.serving is None:
            raise ValueError(
                "accuracy runs GSM8K on the servers of spec.serving's arms: set spec.serving too "
                "(its points may be empty)"
            )
        if self.serving is not None:
            floor = min_timeout_seconds(self.serving)
            if self.timeout_seconds < floor:
                raise ValueError(
                    f"timeoutSeconds={self.timeout_seconds} is too short for spec.serving: "
                    f"{len(self.serving.arms)} arms × startupTimeoutSeconds {self.serving.startup_timeout_seconds} "
                    f"= {floor} s of model loading alone; set timeoutSeconds ≥ {floor} (a DeepSeek-V4.1 A/B "
                    f"with GSM8K takes 3–4 h: 14400) or lower serving.startupTimeoutSeconds"
                )
        return self


def min_timeout_seconds(serving: ServingSpec) -> int:
    """The smallest ``timeoutSeconds`` an experiment with ``serving`` may have: every arm's
    ``startupTimeoutSeconds`` (the model load it is allowed) fits the Job deadline."""
    return len(serving.arms) * serving.startup_timeout_seconds


class ObjectMeta(CamelModel):
    """The subset of ``metadata`` an experiment file carries; the rest is the API server's."""

    model_config = CamelModel.model_config | {"extra": "allow"}

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class Experiment(CamelModel):
    """A whole ``ShardedProjectionExperiment`` object as a user writes it for ``kubectl apply``."""

    api_version: Literal["bench.spx.dev/v1alpha1"] = Field(default=API_VERSION)
    kind: Literal["ShardedProjectionExperiment"] = KIND
    metadata: ObjectMeta
    spec: ExperimentSpec
    status: dict[str, Any] | None = None
