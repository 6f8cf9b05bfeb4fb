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

Phase = Literal["Pending", "Queued", "Running", "Analyzing", "Succeeded", "Failed"]
Verdict = Literal["Pass", "Fail", "Inconclusive"]
GatherSource = Literal["measured", "modelled"]
#: spx's conditions, then kstatus's (the vocabulary: :mod:`spx.api.conditions`).
ConditionType = Literal["Scheduled", "Completed", "Decided", "Ready", "Reconciling", "Stalled"]
ConditionStatus = Literal["True", "False", "Unknown"]
#: Reasons of the terminal ``Decided`` condition; every terminal outcome sets one of them.
DecidedReason = Literal["Pass", "Fail", "Inconclusive", "InvalidSpec", "BenchmarkFailed", "InfraFailed"]
CrossoverConfidence = Literal["resolved", "within-spread", "none"]


class Condition(CamelModel):
    """A Kubernetes-style condition (``metav1.Condition``); ``last_transition_time`` is RFC 3339 UTC."""

    type: str
    status: ConditionStatus
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    message: str = ""
    last_transition_time: str
    observed_generation: int | None = None


class Environment(CamelModel):
    """Fingerprint of where the measurement ran: what the numbers are valid for.

    ``nccl_env`` holds the ``NCCL_*`` variables the bench saw (e.g. ``NCCL_NVLS_ENABLE``, ``NCCL_ALGO``):
    they change which all-gather algorithm runs, so two runs are comparable only when they match.
    """

    gpu: str | None = None
    gpu_count: int | None = None
    compute_capability: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    nccl: str | None = None
    vllm: str | None = None
    node: str | None = None
    python: str | None = None
    spx: str | None = None
    device: str | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    l2_bytes: int | None = None
    nccl_env: dict[str, str] = Field(default_factory=dict)
    kernels: list[str] = Field(default_factory=list)


class KernelPoint(CamelModel):
    """One token count of the sweep, summarised.

    Times are µs per call, the median over samples of the max over ranks. ``speedup`` is
    ``replicated_us / split_us`` (> 1: the split wins). ``iqr_pct`` is the larger of the two
    candidates' interquartile range over median, in percent.
    """

    tokens: int = Field(gt=0)
    rows_per_rank: int = Field(ge=0)
    replicated_us: float = Field(gt=0)
    split_us: float = Field(gt=0)
    gather_us: float | None = Field(default=None, ge=0)
    speedup: float = Field(gt=0)
    iqr_pct: float = Field(default=0.0, ge=0)
    replicated_iqr_pct: float = Field(default=0.0, ge=0)
    split_iqr_pct: float = Field(default=0.0, ge=0)
    max_abs_error: float | None = Field(default=None, ge=0)
    decided: bool = True


class KernelStatus(CamelModel):
    """Outcome of the kernel microbenchmark and its analysis (``spx.analysis``)."""

    points: list[KernelPoint] = Field(default_factory=list)
    crossover_tokens: float | None = None
    first_winning_tokens: int | None = None
    crossover_confidence: CrossoverConfidence = "none"
    recommended_threshold_tokens: int | None = None
    threshold_rounding: str | None = None
    gather_source: GatherSource | None = None
    gemm_backend: str | None = None
    timer: str | None = None


class ExperimentStatus(CamelModel):
    """``status`` of a ``ShardedProjectionExperiment``.

    ``verdict`` is set only once ``Decided`` is True with a reason of Pass/Fail/Inconclusive; a spec
    that fails validation or a run that fails sets ``Decided=True`` with reason InvalidSpec,
    BenchmarkFailed or InfraFailed and leaves ``verdict`` unset.
    """

    model_config = CamelModel.model_config | {"extra": "ignore"}

    phase: Phase = "Pending"
    observed_generation: int | None = None
    job_name: str | None = None
    start_time: str | None = None
    completion_time: str | None = None
    message: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    environment: Environment | None = None
    kernel: KernelStatus | None = None
    serving: ServingStatus | None = None
    accuracy: AccuracyStatus | None = None
    verdict: Verdict | None = None
    verdict_reasons: list[str] = Field(default_factory=list)
    result_config_map: str | None = None
