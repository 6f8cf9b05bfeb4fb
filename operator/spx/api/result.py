"""The result document the kernel bench emits (``result.json``; JSON lines on a pod's stdout).

Versioned by ``schema_version``; readers reject a document of an unknown major version. It keeps
every sample so the analysis can be re-run offline and a partial run is never thrown away
(``complete = False`` with ``error`` set, the points measured so far kept).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Literal, Self

from pydantic import Field, field_validator, model_validator

from spx.api.accuracy import AccuracyStatus
from spx.api.base import CamelModel
from spx.api.combinations import CombinationError
from spx.api.serving import ServingStatus
from spx.api.spec import ExperimentSpec
from spx.api.status import Environment, KernelPoint
from spx.api.step import StepStatus
from spx.vocabulary import (
    Execution,
    ExecutionMode,
    GatherSource,
    GemmBackend,
    ResolvedDevice,
    ResolvedGatherBackend,
    Timer,
)

RESULT_SCHEMA_VERSION: Final = "spx.dev/kernel-result/v1"



class CandidateStats(CamelModel):
    """All samples of one candidate at one token count, in µs per call.

    Each sample is the max over ranks of that rank's timed interval (:mod:`spx.bench.timing`; docs/kernel-benchmark.md
    "Method"): the GPU span (CUPTI) on GPUs, the host wall time on CPU; in measurement order: both
    candidates are timed once per round (alternating), so ``samples_us[i]`` of ``replicated`` and of
    ``split`` at one point come from the same round ``i`` (the paired bootstrap of
    :mod:`spx.analysis.interval` relies on it). ``iqr_pct`` = (q3 − q1) / median × 100.
    ``host_samples_us`` are the host's issue times of the same candidate, measured with the GPU kept
    busy (empty in results from before they were measured), ``host_median_us`` their median; with a
    modelled gather in eager mode they include its modelled host time (``PointResult.gather_host_us``).
    """

    samples_us: list[float] = Field(default_factory=list)
    median_us: float = Field(gt=0)
    q1_us: float = Field(ge=0)
    q3_us: float = Field(ge=0)
    iqr_pct: float = Field(ge=0)
    kernels: list[str] = Field(default_factory=list)
    host_samples_us: list[float] = Field(default_factory=list)
    host_median_us: float | None = Field(default=None, ge=0)

    @field_validator("samples_us", "host_samples_us")
    @classmethod
    def _timings(cls, samples: list[float]) -> list[float]:
        """Refuse a sample that is not a time: not finite, or negative (a corrupt file)."""
        bad = [(i, x) for i, x in enumerate(samples) if not math.isfinite(x) or x < 0]
        if bad:
            raise ValueError(f"every sample must be a finite time >= 0 µs: {len(bad)} {'is' if len(bad) == 1 else 'are'} "
                             f"not, the first at [{bad[0][0]}] ({bad[0][1]}); a corrupt file: re-run, or restore the "
                             "run's result.json")
        return samples


class PointResult(CamelModel):
    """One token count: both candidates, the gather, and the correctness check.

    ``padded_tokens`` = M rounded up to a multiple of TP; ``rows_per_rank`` = padded_tokens / TP.
    ``shard_gemm_us`` is the split candidate's GEMM alone (median), ``gather_us`` its all-gather
    alone (median; measured from the gather kernels' spans, or modelled).
    ``gather_path`` names the all-gather that ran at this size (``nccl``, ``gloo``, ``vllm-custom``,
    ``vllm-nccl``, ``modelled``, ``none``: vLLM switches from its custom all-gather to NCCL above 2 MiB
    per shard). ``max_abs_error`` is max |split − replicated| over the trimmed ``[M, N]`` output.
    ``reference_rel_error`` is the replicated output's relative Frobenius error against the fp32
    reference ``x.float() @ W_deq.float().T`` (``W_deq`` the dequantised checkpoint weight); the bench
    fails the run when it exceeds :attr:`KernelResult.reference_tolerance`.
    ``execution`` is how the point was timed (``graph``: CUDA-graph replays; ``eager``: op by op, as
    vLLM runs batches above its largest capture size) and ``execution_reason`` why
    (:func:`spx.analysis.execution.graph_or_eager`). ``gather_host_us`` is the all-gather's host issue
    time included in the split's host samples, ``gather_host_source`` whether it was measured (inside
    the sample) or modelled (``kernel.gatherModel.hostUs``). ``uncovered_samples`` counts host samples
    whose GPU cover ran out (:func:`spx.bench.timing.time_host_issue`).
    fails the run when it exceeds :attr:`KernelResult.reference_tolerance`. ``added_because`` says why
    an adaptive sweep (``sweep.refine``) measured this count (``None``: one of the listed counts).
    ``pad_free`` is the third candidate, the split with a pad-free shard
    (:func:`spx.bench.sequence_parallel.pad_free_shard`: spx's proposal for vLLM, timed like the split,
    same gather; ``None`` in documents written before it), played by rank ``pad_free_rank`` (TP − 1, the
    rank that pads, when the gather is modelled); ``pad_free_max_abs_diff`` its max |difference| from
    the ``sp_shard`` path's output of the same rows (0 where the GEMM is deterministic).
    """

    tokens: int = Field(gt=0)
    padded_tokens: int = Field(gt=0)
    rows_per_rank: int = Field(ge=0)
    replicated: CandidateStats
    split: CandidateStats
    shard_gemm_us: float | None = Field(default=None, ge=0)
    gather_us: float | None = Field(default=None, ge=0)
    gather_source: GatherSource
    gather_path: str | None = Field(default=None, max_length=64)
    max_abs_error: float = Field(ge=0)
    max_abs_reference: float | None = Field(default=None, ge=0)
    reference_rel_error: float | None = Field(default=None, ge=0)
    execution: ExecutionMode | None = None
    execution_reason: str | None = Field(default=None, max_length=256)
    gather_host_us: float | None = Field(default=None, ge=0)
    gather_host_source: GatherSource | None = None
    uncovered_samples: int = Field(default=0, ge=0)
    added_because: str | None = Field(default=None, max_length=512)
    pad_free: CandidateStats | None = None
    pad_free_rank: int | None = Field(default=None, ge=0)
    pad_free_max_abs_diff: float | None = Field(default=None, ge=0)


class KernelResult(CamelModel):
    """The whole bench output for one experiment run.

    ``gemm_backend``, ``gather_backend`` and ``timer`` are what ran (``auto`` resolved; the spec's request in a
    partial result written before any rank resolved them: :func:`spx.runner.local.partial_result`);
    ``gemm_backend_reason`` says why the backend was chosen (e.g. ``auto: vLLM 0.33 prefers Humming on SM90 …; humming-kernels 0.1.19 importable; runs
    W8A16``), ``reference_tolerance`` the largest relative error against the fp32 reference this
    backend was allowed (``spx.bench.gemm.reference_tolerance``). ``execution`` is ``spec.kernel.execution``
    as run, ``max_cudagraph_capture_size`` the vLLM capture limit ``auto`` compared each point with.

    Raises (on validation): ``pydantic.ValidationError`` naming the bad field.
    """

    schema_version: Literal["spx.dev/kernel-result/v1"] = RESULT_SCHEMA_VERSION
    experiment: str = "local"
    spec: ExperimentSpec
    environment: Environment = Field(default_factory=Environment)
    world_size: int = Field(ge=1)
    gemm_backend: GemmBackend
    """The backend that ran; ``auto`` only in a partial result whose ranks died before resolving it."""
    gemm_backend_reason: str | None = Field(default=None, max_length=1024)
    reference_tolerance: float | None = Field(default=None, gt=0)
    gather_backend: ResolvedGatherBackend | Literal["auto"]
    """The all-gather that ran; ``auto`` only in a partial result whose ranks died before resolving it."""
    gather_source: GatherSource
    timer: Timer
    """The timer that ran; ``auto`` only in a partial result whose ranks died before resolving it."""
    device: ResolvedDevice
    cuda_graphs: bool
    execution: Execution | None = None
    max_cudagraph_capture_size: int | None = Field(default=None, ge=1)
    capture_size_reason: str | None = Field(default=None, max_length=256)
    points: list[PointResult] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    complete: bool = True
    error: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    wall_seconds: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent_points(self) -> Self:
        """Refuse shapes that are not the spec's TP split (``paddedTokens`` = ceil(tokens / TP)·TP, ``rowsPerRank``
        = it / TP) and samples of one candidate only (a token count measured twice is the analysis's to refuse:
        :func:`repeated_tokens`; the operator records it as a failed benchmark)."""
        problems: list[str] = []
        tp = self.spec.parallelism.tensor_parallel_size
        for i, point in enumerate(self.points):
            rows = rows_per_rank(point.tokens, tp)
            if point.rows_per_rank != rows:
                problems.append(f"points[{i}].rowsPerRank: {point.rows_per_rank}, but {point.tokens} tokens split over "
                                f"spec.parallelism.tensorParallelSize {tp} ranks is {rows} rows per rank; the file is "
                                "corrupt or its TP was edited: re-run, or restore the run's result.json")
            elif point.padded_tokens != rows * tp:
                problems.append(f"points[{i}].paddedTokens: {point.padded_tokens}, but {point.tokens} tokens padded to "
                                f"a multiple of TP{tp} is {rows * tp}; the file is corrupt: re-run, or restore it")
            rep, split = len(point.replicated.samples_us), len(point.split.samples_us)
            if (rep == 0) != (split == 0):  # (none at all: a result from before samples were kept)
                empty, other, n = ("replicated", "split", split) if rep == 0 else ("split", "replicated", rep)
                problems.append(f"points[{i}].{empty}.samplesUs: empty, but {other}.samplesUs has {n}; both candidates "
                                "are timed in the same rounds (a corrupt file: re-run, or restore the run's result.json)")
        if problems:
            raise CombinationError(problems)
        return self


def rows_per_rank(tokens: int, tensor_parallel_size: int) -> int:
    """Rows (tokens) each of ``tensor_parallel_size`` ranks projects when a batch of ``tokens`` rows is split by
    token: ``ceil(tokens / TP)``; the batch is padded to ``rows_per_rank · TP`` rows (vLLM's sequence-parallel
    split pads M to a multiple of TP: ``spx.bench.sequence_parallel``). The one rule behind a point's
    ``rowsPerRank``/``paddedTokens`` (:class:`spx.bench.candidates.PointPlan`), their check here and
    ``spx report``'s reading of a status's TP.

    Raises:
        ValueError: ``tokens < 1`` or ``tensor_parallel_size < 1``.
    """
    if tokens < 1 or tensor_parallel_size < 1:
        raise ValueError(f"need tokens >= 1 and tensor_parallel_size >= 1, got {tokens} and {tensor_parallel_size}")
    return -(-tokens // tensor_parallel_size)


def repeated_tokens(points: Sequence[PointResult | KernelPoint]) -> list[str]:
    """One problem per point whose token count an earlier point already has (``points[i].tokens: …``, with the fix):
    the analysis keys points by their count, so such a result cannot be analysed."""
    problems: list[str] = []
    seen: dict[int, int] = {}
    for i, point in enumerate(points):
        if point.tokens in seen:
            problems.append(f"points[{i}].tokens: {point.tokens} repeats points[{seen[point.tokens]}].tokens; a "
                            "result holds one point per token count: remove the repeated point (or re-run)")
        seen.setdefault(point.tokens, i)
    return problems


SUMMARY_SCHEMA_VERSION: Final = "spx.dev/kernel-summary/v1"
#: Kubernetes truncates a container's termination message at 4096 bytes.
SUMMARY_MAX_BYTES = 4096


class ResultSummary(CamelModel):
    """Bounded summary of a :class:`KernelResult` (≤ ``SUMMARY_MAX_BYTES`` as compact JSON).

    Written by the bench pod to its termination message (``/dev/termination-log``) so the operator
    gets the crossover inputs even when it cannot read the pod's log. Carries every point's medians,
    spread and error (as :class:`~spx.api.status.KernelPoint`), the fingerprint without kernel names,
    and whether the run completed.

    After ``spx run --serving`` it also carries ``serving`` and ``accuracy``: the serving A/B's and
    GSM8K's statuses as :func:`spx.analysis.serving.summarize` / :func:`spx.analysis.accuracy.summarize`
    computed them in the pod, shrunk to fit (per-arm values, reasons and failure texts go before any
    kernel point does). With ``spec.serving.step`` it carries ``step``, the step A/B's status as
    :func:`spx.analysis.step.summarize` computed it in the pod, shrunk in the declared order of
    :func:`spx.api.wire.step_levels` (the gate threshold's effects, which decide, are kept). The full result
    documents travel in the log.
    """

    schema_version: Literal["spx.dev/kernel-summary/v1"] = SUMMARY_SCHEMA_VERSION
    points: list[KernelPoint] = Field(default_factory=list)
    environment: Environment = Field(default_factory=Environment)
    world_size: int = Field(ge=1)
    gemm_backend: GemmBackend
    gather_source: GatherSource
    timer: Timer
    complete: bool = True
    error: str | None = Field(default=None, max_length=512)
    serving: ServingStatus | None = None
    accuracy: AccuracyStatus | None = None
    step: StepStatus | None = None
