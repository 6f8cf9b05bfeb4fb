"""The ``ShardedProjectionExperiment`` status: the gating contract read by release pipelines.

``spx run`` writes the same model to ``status.json`` so a local run and a cluster run are read alike
(``spx gate status.json`` or ``kubectl get spx NAME -o jsonpath='{.status.verdict}'``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from spx.api.accuracy import AccuracyStatus
from spx.api.base import CamelModel
from spx.api.serving import ServingStatus
from spx.vocabulary import DECIDED_REASONS, PHASES, VERDICTS, one_of
from spx.vocabulary import DecidedReason as DecidedReason  # re-exported: the status's types
from spx.vocabulary import Phase as Phase
from spx.vocabulary import Verdict as Verdict

GatherSource = Literal["measured", "modelled"]
#: spx's conditions, then kstatus's (the vocabulary: :mod:`spx.api.conditions`).
ConditionType = Literal["Scheduled", "Completed", "Decided", "Ready", "Reconciling", "Stalled"]
ConditionStatus = Literal["True", "False", "Unknown"]
CrossoverConfidence = Literal["resolved", "within-spread", "none"]


class Condition(CamelModel):
    """A Kubernetes-style condition (``metav1.Condition``); ``last_transition_time`` is RFC 3339 UTC."""

    type: str
    """Condition type (Scheduled, Completed, Decided)."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024,
                        description=f"CamelCase reason (for Decided: {one_of(DECIDED_REASONS)}).")
    message: str = ""
    """Human-readable details."""
    last_transition_time: str
    """When status last changed (RFC 3339, UTC)."""
    observed_generation: int | None = None
    """metadata.generation the condition was set for."""


class Environment(CamelModel):
    """Fingerprint of where the measurement ran: what the numbers are valid for.

    ``nccl_env`` holds the ``NCCL_*`` variables the bench saw (e.g. ``NCCL_NVLS_ENABLE``, ``NCCL_ALGO``):
    they change which all-gather algorithm runs, so two runs are comparable only when they match.
    """

    gpu: str | None = None
    """GPU model (e.g. NVIDIA H200), or the CPU for a CPU run."""
    gpu_count: int | None = None
    """GPUs (ranks) used."""
    compute_capability: str | None = None
    """CUDA compute capability (e.g. 9.0)."""
    driver: str | None = None
    """NVIDIA driver version."""
    cuda: str | None = None
    """CUDA runtime version of torch."""
    torch: str | None = None
    """torch version."""
    nccl: str | None = None
    """NCCL version."""
    vllm: str | None = None
    """vLLM version, when vLLM's kernels or servers were used."""
    node: str | None = None
    """Kubernetes node the pod ran on."""
    python: str | None = None
    """Python version."""
    spx: str | None = None
    """spx version."""
    device: str | None = None
    """cuda or cpu."""
    sm_clock_mhz: int | None = None
    """SM clock in MHz during the run."""
    mem_clock_mhz: int | None = None
    """Memory clock in MHz during the run."""
    l2_bytes: int | None = None
    """L2 cache size in bytes."""
    nccl_env: dict[str, str] = Field(default_factory=dict)
    """The NCCL_* variables the bench saw (they change which all-gather algorithm runs)."""
    kernels: list[str] = Field(default_factory=list)
    """Names of the GPU kernels the candidates ran (from the profiler)."""


class KernelPoint(CamelModel):
    """One token count of the sweep, summarised.

    Times are µs per call, the median over samples of the max over ranks. ``speedup`` is
    ``replicated_us / split_us`` (> 1: the split wins). ``iqr_pct`` is the larger of the two
    candidates' interquartile range over median, in percent.
    """

    tokens: int = Field(gt=0)
    """Token count M."""
    rows_per_rank: int = Field(ge=0)
    """Rows each rank projects in the split candidate: ceil(M/TP)."""
    replicated_us: float = Field(gt=0)
    """Median µs of the replicated GEMM (max over ranks)."""
    split_us: float = Field(gt=0)
    """Median µs of the split candidate: shard GEMM + all-gather."""
    gather_us: float | None = Field(default=None, ge=0)
    """Median µs of the all-gather alone."""
    speedup: float = Field(gt=0)
    """replicatedUs / splitUs (> 1: the split wins)."""
    iqr_pct: float = Field(default=0.0, ge=0)
    """The larger of the two candidates' interquartile range over median, in percent."""
    replicated_iqr_pct: float = Field(default=0.0, ge=0)
    """Interquartile range over median of the replicated samples, in percent."""
    split_iqr_pct: float = Field(default=0.0, ge=0)
    """Interquartile range over median of the split samples, in percent."""
    max_abs_error: float | None = Field(default=None, ge=0)
    """Max |split − replicated| over the outputs."""
    decided: bool = True
    """False when the speedup lies within the spread and the point cannot decide the verdict."""


class KernelStatus(CamelModel):
    """Outcome of the kernel microbenchmark and its analysis (``spx.analysis``)."""

    points: list[KernelPoint] = Field(default_factory=list)
    """One summary per measured token count, in sweep order."""
    crossover_tokens: float | None = None
    """Token count where the split starts to beat replicated (interpolated); unset: no crossover measured."""
    first_winning_tokens: int | None = None
    """Smallest measured token count from which the split wins at every larger one."""
    crossover_confidence: CrossoverConfidence = "none"
    """resolved, within-spread (the crossover lies inside the measurement spread) or none."""
    recommended_threshold_tokens: int | None = None
    """The _SHARD_FUSED_WQA_WKV_MIN_TOKENS these measurements support, rounded by gate.thresholdRounding."""
    threshold_rounding: str | None = None
    """Rounding used for the recommended threshold."""
    gather_source: GatherSource | None = None
    """measured or modelled all-gather times."""
    gemm_backend: str | None = None
    """GEMM backend that ran."""
    timer: str | None = None
    """Timer that produced the samples."""


class ExperimentStatus(CamelModel):
    """``status`` of a ``ShardedProjectionExperiment``.

    ``verdict`` is set only once ``Decided`` is True with a reason of Pass/Fail/Inconclusive; a spec
    that fails validation or a run that fails sets ``Decided=True`` with reason InvalidSpec,
    BenchmarkFailed or InfraFailed and leaves ``verdict`` unset.
    """

    model_config = CamelModel.model_config | {"extra": "ignore"}

    phase: Phase = Field(default="Pending", description=f"{one_of(PHASES)}.")
    observed_generation: int | None = None
    """metadata.generation of the spec this status describes."""
    job_name: str | None = None
    """Name of the bench Job of the current run."""
    start_time: str | None = None
    """When the run started (RFC 3339, UTC)."""
    completion_time: str | None = None
    """When the run ended (RFC 3339, UTC)."""
    message: str | None = None
    """Human-readable summary of the current state."""
    conditions: list[Condition] = Field(default_factory=list)
    """Scheduled, Completed and the terminal Decided (set on every outcome; kubectl wait --for=condition=Decided), keyed by type."""
    environment: Environment | None = None
    """Where the measurement ran: GPU, driver, CUDA, torch, NCCL, vLLM, node, clocks."""
    kernel: KernelStatus | None = None
    """Outcome of the kernel microbenchmark: per-token points, crossover, recommended threshold."""
    serving: ServingStatus | None = None
    """Outcome of the serving A/B and its gate."""
    accuracy: AccuracyStatus | None = None
    """Outcome of the GSM8K check and its gate."""
    verdict: Verdict | None = Field(
        default=None, description=f"{one_of(VERDICTS)}; set only when Decided is True with one of those reasons.")
    verdict_reasons: list[str] = Field(default_factory=list)
    """Why the verdict is what it is, most important first."""
    result_config_map: str | None = None
    """ConfigMap holding the full result document, the pod log and the raw outputs."""
