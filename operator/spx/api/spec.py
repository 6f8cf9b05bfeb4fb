"""The ``ShardedProjectionExperiment`` spec (group ``bench.spx.dev``, version ``v1alpha1``).

The same model validates a file given to ``spx run`` and the object the operator reconciles, so an
invalid experiment is rejected before anything reaches a GPU. Field defaults describe the motivating
case: DeepSeek-V4.1's ``fused_wqa_wkv`` projection (hidden 5120 → 1280 + 512) at TP8 on Hopper.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from spx.api.accuracy import AccuracySpec
from spx.api.base import CamelModel, FiniteFloat
from spx.api.pod import PodSpec, path_overlaps
from spx.api.serving import ServingSpec
from spx.api.stage import StageSpec
from spx.vocabulary import (
    GATHER_BACKEND_MEANINGS,
    GATHER_BACKENDS,
    GEMM_BACKEND_MEANINGS,
    GEMM_BACKENDS,
    one_of,
)
from spx.vocabulary import GatherBackend as GatherBackend  # re-exported: the spec's types
from spx.vocabulary import GemmBackend as GemmBackend

GROUP = "bench.spx.dev"
VERSION = "v1alpha1"
KIND: Final = "ShardedProjectionExperiment"
PLURAL = "shardedprojectionexperiments"
SINGULAR = "shardedprojectionexperiment"
SHORT_NAMES = ["spx"]
API_VERSION: Final = "bench.spx.dev/v1alpha1"

#: vLLM ≥ 0.33 ``_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` (``vllm/models/deepseek_v41/attention.py``).
VLLM_DEFAULT_THRESHOLD_TOKENS = 2048

#: The seed PR's token sweep (docs/seed.md; ``operator/spx/data/h20_tp8_fused_wqa_wkv.csv``).
SEED_TOKENS = [6, 12, 24, 48, 96, 384, 1024, 2048, 4096, 8192, 16384]

WeightFormat = Literal["mxfp8-block32-ue8m0", "fp8-block128-ue8m0", "bf16"]
ActivationDtype = Literal["bfloat16", "float16", "float32"]
Timer = Literal["auto", "cupti", "cuda-events", "host"]
Device = Literal["auto", "cuda", "cpu"]
#: ``kernel.execution``: how each point is timed (``auto``: as vLLM would run that batch size).
Execution = Literal["auto", "graph", "eager"]
ThresholdRounding = Literal["next-power-of-two", "next-multiple-of-tp", "none"]
#: How the recommended threshold is chosen (``spx.analysis.band``): from the interpolated break-even
#: (``break-even``), or the smallest measured count from which the speedup's lower bound stays ≥ 1.
ThresholdRule = Literal["break-even", "lower-bound"]

#: Block edge of the DeepSeek-V3-style FP8 block format (128×128 blocks, ``weight_block_size: [128, 128]``).
FP8_BLOCK = 128
#: Block edge of MXFP8 as the DeepSeek-V4.1 checkpoint stores it (32×32 blocks; OCP MX spec: 32 elements
#: share one E8M0 scale). vLLM 0.33: ``DeepseekV4FP8Config.get_quant_method`` routes ``[32, 32]`` blocks with
#: e8m0 scales to ``ModelOptLinearMethod`` (MXFP8), ``vllm/models/deepseek_v41/quant_config.py``.
MXFP8_BLOCK = 32

#: Weight format → block edge b (one power-of-two scale per b×b block; N and K must be multiples of b).
#: ``bf16`` has no blocks (``None``). The V4.1 default is ``mxfp8-block32-ue8m0``; ``fp8-block128-ue8m0``
#: is the DeepSeek-V3 / V3.1 layout (``weight_scale_inv`` per 128×128 block, ``scale_fmt: ue8m0``).
WEIGHT_FORMAT_BLOCK: Final[dict[str, int | None]] = {
    "mxfp8-block32-ue8m0": MXFP8_BLOCK,
    "fp8-block128-ue8m0": FP8_BLOCK,
    "bf16": None,
}
#: The format of DeepSeek-V4.1's ``fused_wqa_wkv`` (and the default of :class:`ProjectionSpec`).
V41_WEIGHT_FORMAT: Final = "mxfp8-block32-ue8m0"


def weight_block(weight_format: str) -> int | None:
    """Block edge of ``weight_format`` (32 or 128), ``None`` for ``bf16``.

    Raises:
        ValueError: an unknown format (lists the known ones).
    """
    if weight_format not in WEIGHT_FORMAT_BLOCK:
        raise ValueError(f"weightFormat {weight_format!r} is unknown; use one of {sorted(WEIGHT_FORMAT_BLOCK)}")
    return WEIGHT_FORMAT_BLOCK[weight_format]


class ProjectionSpec(CamelModel):
    """The projection under test: ``Y[M, N] = X[M, K] · Wᵀ`` with ``K = hidden_size``, ``N = sum(output_sizes)``.

    ``output_sizes`` are the merged column blocks (``fused_wqa_wkv``: q_a 1280 + kv 512 = 1792).
    ``weight_format`` (:data:`WEIGHT_FORMAT_BLOCK`): ``mxfp8-block32-ue8m0`` (default) is FP8 e4m3 with
    one power-of-two (UE8M0) scale per 32×32 block, as the DeepSeek-V4.1 checkpoint stores
    ``fused_wqa_wkv``; ``fp8-block128-ue8m0`` the same with 128×128 blocks (DeepSeek-V3-style
    checkpoints); ``bf16`` unquantized. K and every output size must be multiples of the block edge.
    """

    name: str = Field(default="fused_wqa_wkv", min_length=1, max_length=63)
    """Name of the projection in reports and metrics (default fused_wqa_wkv)."""
    hidden_size: int = Field(default=5120, gt=0, le=65536)
    """K, the input width (hidden size) of the projection."""
    output_sizes: list[Annotated[int, Field(gt=0, le=65536)]] = Field(
        default_factory=lambda: [1280, 512], min_length=1, max_length=16
    )
    """The merged output column blocks; N is their sum (fused_wqa_wkv: q_a 1280 + kv 512)."""
    weight_format: WeightFormat = V41_WEIGHT_FORMAT
    """Weight storage: mxfp8-block32-ue8m0 (default, DeepSeek-V4.1: FP8 e4m3, one UE8M0 power-of-two scale per 32×32 block), fp8-block128-ue8m0 (DeepSeek-V3-style 128×128 blocks) or bf16; K and every output size must be multiples of the block edge."""
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
        block = WEIGHT_FORMAT_BLOCK[self.weight_format]
        if block is None:
            return self
        others = ", ".join(f"{f} ({b})" for f, b in WEIGHT_FORMAT_BLOCK.items() if b and f != self.weight_format)
        if self.hidden_size % block:
            raise ValueError(
                f"hiddenSize={self.hidden_size} is not a multiple of {block}, the block size of weightFormat "
                f"{self.weight_format}; use a multiple of {block}, or weightFormat {others} or bf16"
            )
        bad = [n for n in self.output_sizes if n % block]
        if bad:
            raise ValueError(
                f"outputSizes {bad[:8]}{' …' if len(bad) > 8 else ''} are not multiples of {block}, the block size "
                f"of weightFormat {self.weight_format}; use multiples of {block}, or weightFormat {others} or bf16"
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


class RefineSpec(CamelModel):
    """The adaptive sweep (opt-in): after the listed counts, add counts where the crossover is not bracketed.

    Planner: ``spx.analysis.refine`` (counts are multiples of TP, each recorded with why it was added);
    it stops when every speedup curve's bracket is within ``±bracketRelative`` of its break-even or no
    wider than ``floorTokens``, or after ``maxAddedPoints`` / ``maxRounds``.
    """

    bracket_relative: float = Field(default=0.10, gt=0.0, le=1.0)
    """The bracket is narrow enough within ± this fraction of the break-even (0.10: ±10 %)."""
    floor_tokens: int | None = Field(default=None, ge=1, le=1 << 20)
    """A bracket no wider than this many tokens is narrow enough (default: the TP size; e.g. the GEMM's tile step)."""
    max_added_points: int = Field(default=8, ge=1, le=48)
    """At most this many counts are added to the listed ones."""
    max_rounds: int = Field(default=4, ge=1, le=16)
    """At most this many planning rounds."""
    points_per_round: int = Field(default=2, ge=1, le=8)
    """At most this many counts measured per round."""
    bounds: bool = True
    """Also bracket where the ends of the speedup's intervals (samples, gather prior) and the gather priors cross 1.0, not only the point estimate."""


class SweepSpec(CamelModel):
    """Token counts (M, tokens in the batch) to measure, strictly increasing."""

    tokens: list[Annotated[int, Field(gt=0, le=1 << 24)]] = Field(
        default_factory=lambda: list(SEED_TOKENS), min_length=1, max_length=64
    )
    """Token counts M to measure, strictly increasing, each at most 16,777,216."""
    refine: RefineSpec | None = None
    """Opt-in adaptive sweep: after these counts, add counts around the crossover until it is bracketed."""

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


GatherPrior = Literal["h20-calibrated", "datasheet"]
GatherRegime = Literal["custom", "nccl"]

#: vLLM's custom all-gather handles shards up to 2 MiB; larger shards go to NCCL (``sp_all_gather`` in
#: ``vllm/models/common/ops/sequence_parallel.py``; the seed table's README: custom up to 4096 tokens,
#: NCCL from 6144 at N = 1792 bf16, TP8). At that shape the custom path ends at 4680 tokens (585 rows).
CUSTOM_ALL_GATHER_MAX_SHARD_BYTES: Final = 2 * 1024 * 1024

#: ``prior: datasheet``: one regime, NVLink4 datasheet figures (see :class:`GatherModelSpec`).
DATASHEET_GATHER_LATENCY_US: Final = 10.0
DATASHEET_GATHER_BUS_BANDWIDTH_GBPS: Final = 360.0

#: ``prior: h20-calibrated``: (latency µs, bus bandwidth GB/s) per regime, fitted to the all-gather
#: derived from the seed's 8× H20 table by :func:`spx.analysis.gather_prior.fit_h20_gather_prior`
#: (log-log shard GEMM interpolation; custom: least squares over its 9 points; NCCL: the line through
#: its 2 points). Rounded to 0.1 µs / 1 GB/s; ``tests/unit/test_analysis_gather_prior.py`` checks them
#: against the fit on the shipped table. Method and residuals: docs/kernel-benchmark.md "Gather prior".
H20_GATHER_PRIOR: Final[dict[GatherRegime, tuple[float, float]]] = {
    "custom": (6.1, 372.0),
    "nccl": (38.1, 370.0),
}


class GatherModelSpec(CamelModel):
    """Parameters of the modelled all-gather, used when fewer GPUs than TP are present.

    Per regime ``t_gather(M) = latency + (TP − 1)/TP · bytes(M, N) / bus_bandwidth`` (the nccl-tests
    ``busbw`` convention, NVIDIA/nccl-tests ``doc/PERFORMANCE.md``), ``bytes`` = the gathered output
    ``[M_padded, N]`` in the activation dtype. The regime is the collective vLLM runs: its custom
    all-gather while one shard ``M_padded/TP · N · dtype_bytes`` is at most
    ``custom_all_gather_max_shard_bytes`` (2 MiB; 0 = always NCCL, for a vLLM that runs without its
    custom all-gather), NCCL above.

    ``prior`` picks the parameters:

    - ``h20-calibrated`` (default): fitted per regime to the all-gather contained in the seed's
      8× H20 table (split total − shard GEMM; :mod:`spx.analysis.gather_prior`): custom 6.1 µs +
      372 GB/s, NCCL 38.1 µs + 370 GB/s (:data:`H20_GATHER_PRIOR`). H20, H100 and H200 SXM have the
      same NVLink4 (18 links, 900 GB/s bidirectional) and vLLM runs the same collectives on them.
    - ``datasheet``: one regime, 10 µs + 360 GB/s. NVIDIA's H100/H200 datasheets give 900 GB/s
      bidirectional NVLink per GPU, i.e. 450 GB/s per direction; nccl-tests all-gather on 8×H100 SXM
      typically reaches about 80% of that as bus bandwidth, hence 360 GB/s; 10 µs is the order of an
      8-rank NCCL LL-protocol all-gather of a few KiB over NVLink.

    ``latency_us`` / ``bus_bandwidth_gbps``, when given, replace that parameter in every regime of the
    prior (both given: the single formula of earlier spx versions, whatever the prior). Both priors
    are to be replaced by a fit to a measured gather sweep (``benchmarks/gather_sweep.py``).
    """

    prior: GatherPrior = "h20-calibrated"
    """Parameters when latencyUs/busBandwidthGbps are unset: h20-calibrated (default; vLLM's custom all-gather 6.1 µs + 372 GB/s up to 2 MiB per shard, NCCL 38.1 µs + 370 GB/s, fitted on the seed's 8× H20 table) or datasheet (10 µs + 360 GB/s)."""
    latency_us: FiniteFloat | None = Field(default=None, ge=0.0, le=10_000.0)
    """Fixed latency of one all-gather in µs; when set it replaces the prior's latency in every regime."""
    bus_bandwidth_gbps: FiniteFloat | None = Field(default=None, gt=0.0, le=10_000.0)
    """Bus bandwidth in GB/s (nccl-tests busbw convention); when set it replaces the prior's in every regime."""
    custom_all_gather_max_shard_bytes: int = Field(default=CUSTOM_ALL_GATHER_MAX_SHARD_BYTES, ge=0, le=1 << 40)
    """Largest shard (bytes) vLLM's custom all-gather takes (2 MiB); larger gathers use NCCL. 0: always NCCL."""
    host_us: FiniteFloat = Field(default=15.0, ge=0.0, le=10_000.0)
    """Modelled host time (µs) to issue one all-gather eagerly (only with a modelled gather; labelled modelled). Default 15 µs: the order of a whole small eager NCCL all-gather on 8x H100 (sglang bench_symm: 14-18 µs), so an upper-range guess; measure it on a multi-GPU node."""

    def regime(self, padded_tokens: int, output_size: int, dtype_bytes: int, tensor_parallel_size: int) -> GatherRegime:
        """Which collective vLLM runs for a ``[padded_tokens, output_size]`` gather over TP ranks.

        ``custom`` while one shard (``padded_tokens // TP`` rows × ``output_size`` × ``dtype_bytes``)
        is at most ``custom_all_gather_max_shard_bytes``, else ``nccl``.
        """
        shard_bytes = padded_tokens // max(1, tensor_parallel_size) * output_size * dtype_bytes
        return "custom" if shard_bytes <= self.custom_all_gather_max_shard_bytes else "nccl"

    def parameters(self, regime: GatherRegime) -> tuple[float, float]:
        """``(latency µs, bus bandwidth GB/s)`` used in ``regime``: the prior's, explicit fields overriding."""
        if self.prior == "datasheet":
            latency, bandwidth = DATASHEET_GATHER_LATENCY_US, DATASHEET_GATHER_BUS_BANDWIDTH_GBPS
        else:
            latency, bandwidth = H20_GATHER_PRIOR[regime]
        return (
            latency if self.latency_us is None else self.latency_us,
            bandwidth if self.bus_bandwidth_gbps is None else self.bus_bandwidth_gbps,
        )

    def gather_us(self, padded_tokens: int, output_size: int, dtype_bytes: int, tensor_parallel_size: int) -> float:
        """Modelled all-gather time in µs of a ``[padded_tokens, output_size]`` output over TP ranks.

        ``latency + (TP − 1)/TP · padded_tokens · output_size · dtype_bytes / bus_bandwidth`` with the
        parameters of the regime (:meth:`regime`, :meth:`parameters`); bandwidth in GB/s (10⁹ B/s).
        Zero for TP = 1 (nothing to gather).
        """
        tp = tensor_parallel_size
        if tp <= 1:
            return 0.0
        latency, bandwidth = self.parameters(self.regime(padded_tokens, output_size, dtype_bytes, tp))
        total_bytes = padded_tokens * output_size * dtype_bytes
        return latency + (tp - 1) / tp * total_bytes / (bandwidth * 1e9) * 1e6

    def describe(self) -> str:
        """One line for a result's notes: the prior and each regime's latency and bus bandwidth."""
        (lat_c, bw_c), (lat_n, bw_n) = self.parameters("custom"), self.parameters("nccl")
        source = f"{self.prior} prior"
        if self.latency_us is not None or self.bus_bandwidth_gbps is not None:
            source += " with explicit latencyUs/busBandwidthGbps"
        if (lat_c, bw_c) == (lat_n, bw_n):
            return f"{source}: {lat_n:g} µs + (TP-1)/TP x bytes / {bw_n:g} GB/s"
        return (
            f"{source}: latency + (TP-1)/TP x bytes / busBW; custom all-gather while a shard is <= "
            f"{self.custom_all_gather_max_shard_bytes} B: {lat_c:g} µs, {bw_c:g} GB/s; NCCL above: "
            f"{lat_n:g} µs, {bw_n:g} GB/s"
        )


class KernelSpec(CamelModel):
    """How the kernel microbenchmark measures (method: docs/kernel-benchmark.md "Method", from the seed PR).

    ``gemm_backend`` (docs/kernel-benchmark.md): ``humming`` and ``marlin`` are the MXFP8 W8A16 kernels
    vLLM 0.33 runs for DeepSeek-V4.1 (Humming preferred on SM90, Marlin with ``--linear-backend
    marlin``); ``auto`` picks what vLLM 0.33 would pick for this weight on this GPU (``torch-bf16`` on
    CPU); ``torch-bf16`` (cuBLAS) and ``torch-fp8`` (cuBLASLt W8A8, 128×128 blocks only) are reference
    ceilings, not vLLM's kernels; ``vllm`` builds vLLM's own linear layer.
    """

    gemm_backend: GemmBackend = Field(
        default="auto", description=f"GEMM implementation: {one_of(GEMM_BACKENDS, GEMM_BACKEND_MEANINGS)}.")
    gather: GatherBackend = Field(
        default="auto", description=f"All-gather implementation: {one_of(GATHER_BACKENDS, GATHER_BACKEND_MEANINGS)}.")
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
    """Allow CUDA graphs; false times every point eagerly (as execution: eager)."""
    execution: Execution = "auto"
    """auto (default): a CUDA graph where vLLM would capture the batch size (<= maxCudagraphCaptureSize), eager above, as vLLM 0.33 runs DeepSeek-V4.1; graph or eager: every point."""
    max_cudagraph_capture_size: int | None = Field(default=None, ge=1, le=1 << 20)
    """vLLM's max_cudagraph_capture_size; unset: vLLM 0.33's rule for the GPU (min(maxNumSeqs x (1 + speculative tokens) x 2, 512) on Hopper, 1024 on SM100), with maxNumSeqs and speculative tokens read from serving.extraArgs when given."""
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
    min_speedup_at_or_above_threshold: FiniteFloat = Field(default=1.0, gt=0.0, le=100.0)
    """Smallest speedup (replicated / split time) the split must reach at every measured token count ≥ thresholdTokens."""
    max_abs_error: FiniteFloat = Field(default=0.05, ge=0.0)
    """Largest allowed max |split − replicated| over the outputs."""
    allow_modelled_gather: bool = False
    """Allow a Pass or Fail on speed that rests on a modelled all-gather (otherwise Inconclusive)."""
    allow_cpu_timings: bool = False
    """Allow a Pass or Fail on CPU timings (for pipeline tests on machines without GPUs; otherwise Inconclusive)."""
    threshold_rounding: ThresholdRounding = "next-power-of-two"
    """How the recommended threshold is rounded up from the crossover: next-power-of-two, next-multiple-of-tp or none."""
    threshold_rule: ThresholdRule = "break-even"
    """break-even (round the interpolated break-even up) or lower-bound (the smallest measured count from which the speedup's 95 % lower bound stays >= 1, then rounded)."""


#: Kubernetes label value (apimachinery ``IsValidLabelValue``): ≤ 63 chars, alphanumeric ends.
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: Qualified name of a label key (``IsQualifiedName``): optional DNS-subdomain prefix + "/" + name.
LABEL_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
#: DNS-1123 subdomain (object names: PriorityClass, PVC, experiments).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: Kubernetes resource quantity (``resource.Quantity``), e.g. ``32``, ``500m``, ``128Gi``.
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"

#: DNS-1123 label (namespaces): ≤ 63 of lower-case a-z 0-9 -, alphanumeric ends.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

LabelValue = Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_VALUE)]
#: A label or annotation key as the API server checks it (apimachinery ``IsQualifiedName``): an optional
#: DNS-subdomain prefix of ≤ 253 characters, "/", and a name of ≤ 63.
LabelKey = Annotated[str, Field(min_length=1, max_length=253 + 1 + 63, pattern=LABEL_KEY)]


#: How the bench pod targets GPU nodes by the GPU Feature Discovery labels ``nvidia.com/gpu.product``
#: ∈ ``gpuProducts`` and ``nvidia.com/gpu.compute.major`` = 9: ``required`` (a node without them never
#: runs the pod), ``preferred`` (such nodes first, any GPU node otherwise) or ``none`` (no GPU-label
#: affinity: pools without GFD, e.g. many managed clusters; ``nvidia.com/gpu`` requests still place it).
GpuNodeAffinity = Literal["required", "preferred", "none"]
#: Keys of a core/v1 ``Affinity``.
AFFINITY_KEYS: Final = ("nodeAffinity", "podAffinity", "podAntiAffinity")

#: What a GPU run reserves when ``resources.cpu``/``memory``/``shmSize`` are unset: an 8-GPU H200
#: node's share for one TP8 run (the vLLM serving arms load DeepSeek-V4.1 through host memory).
GPU_DEFAULTS: Final = {"cpu": "32", "memory": "192Gi"}
#: What a CPU smoke run (``kernel.device: cpu``) reserves when unset: ``spx run`` starts 2 gloo ranks
#: on CPU (``spx.runner.sizing.default_nproc``), each ~400 MiB resident
#: (``spx.runner.sizing.RANK_BASE_BYTES``) plus its tensors; 1 Gi of ``/dev/shm`` for gloo.
CPU_DEFAULTS: Final = {"cpu": "2", "memory": "4Gi", "shmSize": "1Gi"}


class ResourcesSpec(CamelModel):
    """Where the bench pod may run and what it reserves (Kubernetes only; ignored by ``spx run``).

    ``gpu_products`` are values of the ``nvidia.com/gpu.product`` node label (GPU Feature Discovery
    spelling, e.g. ``NVIDIA-H200``), used as ``gpu_node_affinity`` says (:data:`GpuNodeAffinity`;
    pools without GFD labels: ``preferred`` or ``none``). ``affinity`` is the user's own core/v1
    Affinity, merged with the GPU-label one: its required node selector terms each get the GPU
    expressions added (``required``), its preferred terms one more (``preferred``), nothing (``none``).
    ``cpu``/``memory`` are the bench container's requests (= limits, Guaranteed QoS so it is not
    evicted first and gets exclusive cores under the static CPU manager); unset, they follow the
    experiment (:data:`GPU_DEFAULTS`, :data:`CPU_DEFAULTS` for ``kernel.device: cpu``). The
    memory-backed ``/dev/shm`` (``shm_size``) counts against ``memory``.
    """

    gpu_products: list[LabelValue] = Field(
        default_factory=lambda: ["NVIDIA-H200", "NVIDIA-H100-80GB-HBM3"], min_length=1, max_length=16
    )
    """Allowed values of the nvidia.com/gpu.product node label (GPU Feature Discovery spelling, e.g. NVIDIA-H200)."""
    gpu_node_affinity: GpuNodeAffinity = "required"
    """How the GPU Feature Discovery labels place the pod: required (default), preferred, or none (GPU pools without GFD labels)."""
    affinity: dict[str, Any] | None = None
    """The user's own core/v1 Affinity (nodeAffinity, podAffinity, podAntiAffinity), merged with the GPU-label affinity of gpuNodeAffinity."""
    node_selector: dict[Annotated[str, Field(max_length=253, pattern=LABEL_KEY)], Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] = Field(
        default_factory=dict, max_length=32
    )
    """Extra node labels the bench pod requires (label keys and values; at most 32)."""
    tolerations: list[dict[str, Any]] = Field(default_factory=list, max_length=32)
    """Tolerations of the bench pod (core/v1 Toleration objects); nvidia.com/gpu NoSchedule is added for GPU runs."""
    cpu: str | None = Field(default=None, pattern=QUANTITY, max_length=32)
    """CPU request = limit of the bench container (a quantity, e.g. 32 or 500m); unset: 32 for GPU runs, 2 for kernel.device cpu."""
    memory: str | None = Field(default=None, pattern=QUANTITY, max_length=32)
    """Memory request = limit of the bench container (e.g. 192Gi; /dev/shm counts against it); unset: 192Gi for GPU runs, 4Gi for kernel.device cpu."""
    shm_size: str | None = Field(default=None, pattern=QUANTITY, max_length=32)
    """Size limit of the memory-backed /dev/shm; unset: the operator's SPX_BENCH_SHM_SIZE (64Gi) for GPU runs, 1Gi for kernel.device cpu."""
    ephemeral_storage: str | None = Field(default=None, pattern=QUANTITY, max_length=32)
    """ephemeral-storage request = limit of the bench container (scratch, caches, /tmp), e.g. 50Gi; unset: none."""

    @field_validator("affinity")
    @classmethod
    def _affinity_shape(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        unknown = sorted(set(v) - set(AFFINITY_KEYS))
        if unknown:
            raise ValueError(f"affinity keys {unknown[:4]} are unknown; a core/v1 Affinity has {', '.join(AFFINITY_KEYS)}")
        bad = [k for k, x in v.items() if not isinstance(x, dict)]
        if bad:
            raise ValueError(f"affinity.{bad[0]} must be an object (a core/v1 {bad[0][0].upper() + bad[0][1:]})")
        return v

    def reserved(self, device: str, default_shm: str | None) -> dict[str, str | None]:
        """``{"cpu", "memory", "shmSize", "ephemeralStorage"}`` the bench pod gets on ``device``
        (``kernel.device``: cpu or another): the fields where set, else :data:`CPU_DEFAULTS` (cpu) or
        :data:`GPU_DEFAULTS` and ``default_shm`` (the operator's ``SPX_BENCH_SHM_SIZE``)."""
        defaults: dict[str, str | None] = dict(CPU_DEFAULTS) if device == "cpu" else {**GPU_DEFAULTS, "shmSize": default_shm}
        return {
            "cpu": self.cpu or defaults["cpu"],
            "memory": self.memory or defaults["memory"],
            "shmSize": self.shm_size or defaults["shmSize"],
            "ephemeralStorage": self.ephemeral_storage,
        }


#: Default of ``spec.scheduling.admissionTimeoutSeconds``: how long a Kueue-suspended Job may wait.
DEFAULT_ADMISSION_TIMEOUT_SECONDS = 6 * 3600


class SchedulingSpec(CamelModel):
    """Optional Kueue queue and priority classes for the bench Job.

    With ``queue_name`` Kueue is the queue: the Job is created suspended with the label
    ``kueue.x-k8s.io/queue-name`` (and ``kueue.x-k8s.io/priority-class`` from
    ``workload_priority_class_name``), a suspended Job holds none of the operator's concurrency slots,
    and the operator refuses the run before creating it when Kueue's API is not served or the
    LocalQueue does not exist (phase ``Failed``, reason ``InfraFailed``, Completed reason
    ``KueueNotInstalled`` / ``LocalQueueNotFound``).

    ``admission_timeout_seconds``: how long the Job may stay suspended waiting for Kueue's admission
    (default 6 h) before the run ends ``InfraFailed`` with reason ``NotAdmitted`` (the Job is deleted
    and the operator's slot freed). It bounds the wait, not the run (``timeoutSeconds`` does that).
    """

    queue_name: str | None = Field(default=None, min_length=1, max_length=63, pattern=LABEL_VALUE)
    """Kueue LocalQueue to submit the Job to (the Job is created suspended, Kueue admits it)."""
    priority_class_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """PriorityClass of the bench pod."""
    workload_priority_class_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    """Kueue WorkloadPriorityClass of the Job (label kueue.x-k8s.io/priority-class; with queueName): its order in Kueue's queue."""
    admission_timeout_seconds: int = Field(default=DEFAULT_ADMISSION_TIMEOUT_SECONDS, ge=60, le=7 * 24 * 3600)
    """Seconds the Job may wait suspended for Kueue admission before the run ends InfraFailed with reason NotAdmitted (default 21600 = 6 h)."""


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
    stage: StageSpec | None = None
    """Optional: time the whole input-projection stage per layer kind (fused_wqa_wkv, compressor, indexer), replicated vs split vs split-all (python -m spx.bench.stage)."""
    pod: PodSpec = Field(default_factory=PodSpec)
    """Cluster-specific fields of the bench pod: runtimeClassName, schedulerName, labels, annotations, env, volumes (allowed by the operator's policy)."""

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
        if self.serving is not None and self.serving.model_pvc:
            clash = [v.name for v in self.pod.volumes if path_overlaps(v.mount_path, self.serving.model_mount_path)]
            if clash:
                raise ValueError(
                    f"pod.volumes {clash[:4]} overlap serving.modelMountPath {self.serving.model_mount_path}, where "
                    "serving.modelPvc is mounted; mount them elsewhere"
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

    @model_validator(mode="after")
    def _runs_somewhere(self) -> ExperimentSpec:
        """Refuse, all at once, field combinations no machine can run (:mod:`spx.api.combinations`)."""
        from spx.api.combinations import CombinationError, combination_problems

        problems = combination_problems(self)
        if problems:
            raise CombinationError(problems)
        return self


def min_timeout_seconds(serving: ServingSpec) -> int:
    """The smallest ``timeoutSeconds`` an experiment with ``serving`` may have: every arm's
    ``startupTimeoutSeconds`` (the model load it is allowed) fits the Job deadline."""
    return len(serving.arms) * serving.startup_timeout_seconds


class ObjectMeta(CamelModel):
    """The subset of ``metadata`` an experiment file carries; the rest is the API server's."""

    model_config = CamelModel.model_config | {"extra": "allow"}

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    namespace: str | None = Field(default=None, min_length=1, max_length=63, pattern=DNS_LABEL)
    labels: dict[LabelKey, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] = Field(default_factory=dict)
    annotations: dict[LabelKey, str] = Field(default_factory=dict)


class Experiment(CamelModel):
    """A whole ``ShardedProjectionExperiment`` object as a user writes it for ``kubectl apply``."""

    api_version: Literal["bench.spx.dev/v1alpha1"] = Field(default=API_VERSION)
    kind: Literal["ShardedProjectionExperiment"] = KIND
    metadata: ObjectMeta
    spec: ExperimentSpec
    status: dict[str, Any] | None = None
