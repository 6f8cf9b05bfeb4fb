"""The ``ShardedProjectionExperiment`` status: the gating contract read by release pipelines.

``spx run`` writes the same model to ``status.json`` so a local run and a cluster run are read alike
(``spx gate status.json`` or ``kubectl get spx NAME -o jsonpath='{.status.verdict}'``).
"""

from __future__ import annotations

import math
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from spx.api.accuracy import AccuracyStatus
from spx.api.base import CamelModel
from spx.api.serving import ServingStatus
from spx.api.step import StepExpectation, StepStatus
from spx.vocabulary import DECIDED_BY, DECIDED_BY_MEANINGS, DECIDED_REASONS, PHASES, VERDICTS, ExecutionMode, one_of
from spx.vocabulary import DecidedBy as DecidedBy
from spx.vocabulary import DecidedReason as DecidedReason  # re-exported: the status's types
from spx.vocabulary import GatherSource as GatherSource
from spx.vocabulary import KernelRegime as KernelRegime
from spx.vocabulary import Phase as Phase
from spx.vocabulary import Verdict as Verdict

ConditionStatus = Literal["True", "False", "Unknown"]
CrossoverConfidence = Literal["resolved", "within-spread", "none", "unbracketed", "priors-disagree"]


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
    host_cpu: str | None = None
    """Host CPU model (from /proc/cpuinfo): eager host times are a property of the node's CPU."""
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


#: Fields of the per-op ``max(host, span)`` curve, withdrawn by issue #28 (it describes no regime): dropped
#: when an older ``status.json`` is read, so documents written before stay readable (re-judge them with
#: ``spx report DIR`` for the regimes' figures).
WITHDRAWN_POINT_FIELDS = ("replicatedHostBoundUs", "splitHostBoundUs", "hostBoundDecided")
WITHDRAWN_KERNEL_FIELDS = ("hostBound", "verdictBound")


def _drop_withdrawn(data: Any, keys: tuple[str, ...]) -> Any:
    """``data`` (a wire dict) without ``keys``; anything else unchanged."""
    if isinstance(data, dict) and any(k in data for k in keys):
        return {k: v for k, v in data.items() if k not in keys}
    return data


class KernelPoint(CamelModel):
    """One token count of the sweep, summarised.

    Times are µs per call, the median over samples of the max over ranks. ``speedup`` is
    ``replicated_us / split_us`` (> 1: the split wins). ``iqr_pct`` is the larger of the two
    candidates' interquartile range over median, in percent. Δg and Δh: docs/kernel-benchmark.md, "Regimes".
    """

    @model_validator(mode="before")
    @classmethod
    def _withdrawn(cls, data: Any) -> Any:
        """Drop the withdrawn max(host, span) fields of an older document (:data:`WITHDRAWN_POINT_FIELDS`)."""
        return _drop_withdrawn(data, WITHDRAWN_POINT_FIELDS)

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
    execution: ExecutionMode | None = None
    """How the point was timed: graph (CUDA-graph replays) or eager (op by op, as vLLM runs batches above its capture limit)."""
    replicated_host_us: float | None = Field(default=None, ge=0)
    """Median host time (µs) to issue the replicated candidate, measured with the GPU kept busy (eager points)."""
    split_host_us: float | None = Field(default=None, ge=0)
    """Median host time (µs) to issue the split candidate (a modelled gather's host time included; eager points)."""
    gpu_delta_us: float | None = None
    """Δg: the split's GPU difference, median split − median replicated GPU span, µs per call (one call per layer); negative: the split saves GPU time."""
    gpu_delta_low_us: float | None = None
    """Lower end of Δg's 95 % interval (paired bootstrap over rounds: sample i of both candidates come from round i), µs."""
    gpu_delta_high_us: float | None = None
    """Upper end of Δg's 95 % interval, µs."""
    host_delta_us: float | None = None
    """Δh: the split's host difference, median split − median replicated host issue time, µs per call (eager points only: a graph point's forward is one graph, host-bound = GPU-bound there); negative: the split issues faster."""
    host_delta_low_us: float | None = None
    """Lower end of Δh's 95 % interval (paired bootstrap over rounds), µs."""
    host_delta_high_us: float | None = None
    """Upper end of Δh's 95 % interval, µs."""
    speedup_low: float | None = Field(default=None, ge=0)
    """Lower end of the speedup's 95 % interval: paired bootstrap of the samples' rounds, widened by a modelled gather prior's own standard error."""
    speedup_high: float | None = Field(default=None, ge=0)
    """Upper end of the speedup's 95 % interval (same sources as speedupLow)."""
    speedup_low_any_prior: float | None = Field(default=None, ge=0)
    """Lower end of the interval over every gather prior spx ships (the spread between priors); equals speedupLow for a measured gather."""
    speedup_high_any_prior: float | None = Field(default=None, ge=0)
    """Upper end of the interval over every gather prior spx ships."""
    added_because: str | None = Field(default=None, max_length=512)
    """Why an adaptive sweep (sweep.refine) measured this token count; unset for the coarse sweep's counts."""


class RegimeSummary(CamelModel):
    """The kernel sweep judged in one regime (``spx.analysis.regimes``; docs/kernel-benchmark.md, "Regimes").

    ``gpu-bound`` judges the GPU spans (the GPU is the bottleneck: the split moves the step by Δg);
    ``host-bound`` judges the host issue times of the eager points (the host is the bottleneck: the step
    moves by Δh; graph points keep their GPU span, as a graph's host cost does not depend on its
    contents). Both use the same threshold rule and rounding (``gate.thresholdRule``,
    ``gate.thresholdRounding``).
    """

    regime: KernelRegime
    """gpu-bound or host-bound."""
    crossover_tokens: float | None = None
    """Interpolated break-even (tokens) in this regime; unset: no crossover measured."""
    first_winning_tokens: int | None = None
    """Smallest measured token count from which the split wins at every larger one, in this regime."""
    crossover_confidence: CrossoverConfidence = "none"
    """resolved, within-spread, unbracketed, priors-disagree or none (as kernel.crossoverConfidence)."""
    recommended_threshold_tokens: int | None = None
    """The threshold this regime's times support (gate.thresholdRule, rounded by gate.thresholdRounding)."""
    speed_verdict: Verdict | None = None
    """What this regime's times alone say at and above gate.thresholdTokens, before the modelled-gather and CPU caps: the verdicts compared between regimes."""
    verdict: Verdict | None = None
    """The gate verdict on this regime's times alone (caps applied)."""
    reasons: list[str] = Field(default_factory=list, max_length=8)
    """This regime's reasons (at most 8 of at most 500 characters), most important first."""


class StakeRow(CamelModel):
    """What splitting at one token count saves (> 0) or costs (< 0): µs per layer, ms per prefill chunk.

    Both regimes: ``saving*`` is the GPU-bound regime (replicated − split GPU span, −Δg), ``hostSaving*``
    the host-bound one (−Δh). Unset values: the count lies outside the measured range (never
    extrapolated), or no eager point carries host times there.
    """

    label: str = Field(max_length=128)
    """band low edge, band high edge, recommended threshold, lower-bound threshold, gate threshold or vLLM default (several, comma-separated, when they fall on one count)."""
    tokens: float = Field(gt=0)
    """Token count M (a prefill chunk of M tokens)."""
    layers: int = Field(ge=1)
    """Layers running this projection once per forward (DeepSeek-V4.1: 40)."""
    replicated_us: float | None = None
    """Replicated µs at M (interpolated log-log between measured counts)."""
    split_us: float | None = None
    """Split µs at M (shard GEMM + all-gather, interpolated)."""
    saving_us: float | None = None
    """replicatedUs − splitUs per layer, µs (> 0: the split saves)."""
    saving_low_us: float | None = None
    """Lower end of the saving over the speedup's any-prior interval, µs per layer."""
    saving_high_us: float | None = None
    """Upper end of the saving over the speedup's any-prior interval, µs per layer."""
    saving_ms_per_chunk: float | None = None
    """savingUs × layers, in ms per prefill chunk of M tokens."""
    saving_low_ms_per_chunk: float | None = None
    """savingLowUs × layers, ms."""
    saving_high_ms_per_chunk: float | None = None
    """savingHighUs × layers, ms."""
    host_saving_us: float | None = None
    """Host-bound regime: −Δh at M (replicated − split host issue time, interpolated linearly in log M), µs per layer (> 0: the split saves); unset without eager host times around M."""
    host_saving_low_us: float | None = None
    """Lower end of the host saving over Δh's 95 % interval, µs per layer."""
    host_saving_high_us: float | None = None
    """Upper end of the host saving over Δh's 95 % interval, µs per layer."""
    host_saving_ms_per_chunk: float | None = None
    """hostSavingUs × layers, ms per prefill chunk of M tokens."""
    host_saving_low_ms_per_chunk: float | None = None
    """hostSavingLowUs × layers, ms."""
    host_saving_high_ms_per_chunk: float | None = None
    """hostSavingHighUs × layers, ms."""


class CrossoverUncertainty(CamelModel):
    """The crossover as an interval, why it is or is not resolved, the indifference band and the stake.

    Definitions: ``spx.analysis.band``. Token ends are floats; an ``*Open`` end lies beyond the measured
    range (the value is then the smallest / largest measured count).
    """

    level: float = Field(default=0.95, gt=0, lt=1)
    """Confidence level of the per-point speedup intervals."""
    confidence_reasons: list[str] = Field(default_factory=list)
    """Why crossoverConfidence is not resolved (bracket width, an interval overlapping 1.0, the gather priors disagreeing); empty when resolved."""
    bracket_low_tokens: int | None = None
    """Last losing measured count below the break-even."""
    bracket_high_tokens: int | None = None
    """First winning measured count (from which the split wins at every larger one)."""
    crossover_low_tokens: float | None = None
    """Break-even of the optimistic curve (every point at speedupHigh)."""
    crossover_high_tokens: float | None = None
    """Break-even of the pessimistic curve (every point at speedupLow)."""
    crossover_low_open: bool = False
    """The optimistic curve wins at every measured count: the crossover may lie below the smallest."""
    crossover_high_open: bool = False
    """The pessimistic curve does not win at the largest measured count: the crossover may lie above it."""
    band_low_tokens: float | None = None
    """Low edge of the indifference band (as crossoverLowTokens, over every gather prior)."""
    band_high_tokens: float | None = None
    """High edge of the indifference band (as crossoverHighTokens, over every gather prior)."""
    band_low_open: bool = False
    """The band reaches below the smallest measured count."""
    band_high_open: bool = False
    """The band reaches above the largest measured count."""
    lower_bound_threshold_tokens: int | None = None
    """The interval rule's threshold: smallest measured count from which speedupLow stays >= 1."""
    threshold_rule: str | None = Field(default=None, max_length=512)
    """The interval rule, in words."""
    layers: int = Field(default=40, ge=1)
    """Layers in one prefill chunk's stake (DeepSeek-V4.1: 40)."""
    stake: list[StakeRow] = Field(default_factory=list)
    """What splitting saves or costs at the band's edges and at each threshold."""


class KernelMixExpectation(CamelModel):
    """The expected difference per layer of splitting from ``thresholdTokens`` over the batch sizes the deployment
    forms (up to maxNumBatchedTokens), in one regime: each size on the aligned counts' curve when M % TP == 0,
    else on the off-aligned counts' (sp_shard's pad path), every size equally likely unless a batch mix is given
    (``spx.analysis.kernel_mix``). Negative: the split saves."""

    threshold_tokens: int = Field(gt=0)
    """The threshold T the expectation splits from (tokens)."""
    regime: KernelRegime
    """gpu-bound (Δg) or host-bound (Δh)."""
    mix: Literal["uniform", "given"] = "uniform"
    """``uniform`` (every size up to maxNumBatchedTokens equally likely) or ``given`` (a batch mix)."""
    pad_path_share: float = Field(ge=0, le=1)
    """Share of the weighted sizes that take the pad path (M % TP != 0): 7 in 8 at TP 8, uniform."""
    delta_us: float
    """Expected Δ per layer, µs."""
    delta_low_us: float
    """Lower end: every point at its interval's lower end (conservative)."""
    delta_high_us: float
    """Upper end: every point at its interval's upper end."""
    aligned_delta_us: float | None = None
    """The same expectation with every size on the aligned curve (the figure without the pad path), µs."""
    up_to_tokens: int = Field(gt=0)
    """The largest size weighed: maxNumBatchedTokens, or less where either class's measured counts stop (never extrapolated)."""
    off_aligned_tokens: list[int] = Field(default_factory=list, max_length=64)
    """The off-aligned counts measured (sweep.offAlignment: T + 1, 2T + 1) that the pad path's curve rests on."""


class KernelStatus(CamelModel):
    """Outcome of the kernel microbenchmark and its analysis (``spx.analysis``).

    The top-level crossover, threshold and ``uncertainty`` are the GPU-bound regime's (GPU spans);
    ``regimes`` holds both regimes' summaries (gpu-bound first; host-bound when eager points carry
    host times). When the regimes' verdicts disagree the step A/B decides (``status.step``);
    ``decided_by`` says which measurement decided ``status.verdict`` and ``next_step`` what to run when
    nothing did.
    """

    points: list[KernelPoint] = Field(default_factory=list)
    """One summary per measured token count, in sweep order."""
    crossover_tokens: float | None = None
    """Token count where the split starts to beat replicated (interpolated); unset: no crossover measured."""
    crossover_tokens_rounded: int | None = None
    """crossoverTokens rounded to whole tokens, half up (28.92 → 29): derived from it whenever the status is built or read (a value written here is replaced), for the Crossover printer column (an API server column can only truncate)."""
    first_winning_tokens: int | None = None
    """Smallest measured token count from which the split wins at every larger one."""
    crossover_confidence: CrossoverConfidence = "none"
    """resolved, within-spread (the crossover lies inside the measurement spread), unbracketed (an unmeasured gap wider than ±10 % of the break-even), priors-disagree (the gather priors put a bracketing point on both sides of 1.0) or none; uncertainty.confidenceReasons says why."""
    recommended_threshold_tokens: int | None = None
    """The _SHARD_FUSED_WQA_WKV_MIN_TOKENS these measurements support, rounded by gate.thresholdRounding: the deciding measurement's (status.judgement.recommendedThresholdTokens) where one decided, else the GPU-bound regime's."""
    threshold_rounding: str | None = None
    """Rounding used for the recommended threshold."""
    gather_source: GatherSource | None = None
    """measured or modelled all-gather times."""
    gemm_backend: str | None = None
    """GEMM backend that ran."""
    timer: str | None = None
    """Timer that produced the samples."""
    regimes: list[RegimeSummary] = Field(default_factory=list, max_length=2)
    """The sweep judged per regime: gpu-bound (GPU spans), then host-bound (eager host issue times) when measured."""
    regimes_agree: bool | None = None
    """True when both regimes reach the same speed verdict at and above gate.thresholdTokens; unset with one regime."""
    decided_by: DecidedBy | None = Field(default=None, description=f"Which measurement decided status.verdict: {one_of(DECIDED_BY, DECIDED_BY_MEANINGS)}.")
    next_step: str | None = Field(default=None, max_length=1024)
    """What to run next when no measurement decided (e.g. the step A/B: spec.serving.step and the command)."""
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    """The largest batch (tokens) the deployment forms: gate.maxNumBatchedTokens, else --max-num-batched-tokens in spec.serving.extraArgs, else vLLM's default for its OpenAI server on a GPU of >= 70 GiB (8192)."""
    max_cudagraph_capture_size: int | None = None
    """vLLM's CUDA-graph capture limit the sweep used: points above it were timed eagerly (execution auto)."""
    uncertainty: CrossoverUncertainty | None = None
    """The crossover as an interval, the indifference band, the stake and the interval rule's threshold."""
    mix_expectations: list[KernelMixExpectation] = Field(default_factory=list, max_length=2)
    """The expected Δ per layer from gate.thresholdTokens over the batch mix (aligned and off-aligned counts as the
    deployment forms them), per regime (gpu-bound, then host-bound); empty without off-aligned counts."""

    @model_validator(mode="before")
    @classmethod
    def _withdrawn(cls, data: Any) -> Any:
        """Drop the withdrawn max(host, span) fields of an older document (:data:`WITHDRAWN_KERNEL_FIELDS`)."""
        return _drop_withdrawn(data, WITHDRAWN_KERNEL_FIELDS)

    @model_validator(mode="after")
    def _round_crossover(self) -> Self:
        """Set ``crossover_tokens_rounded`` from ``crossover_tokens`` (floor(x + 0.5); unset when unset or not finite)."""
        x = self.crossover_tokens
        self.crossover_tokens_rounded = math.floor(x + 0.5) if x is not None and math.isfinite(x) else None
        return self


class JudgementStatus(CamelModel):
    """``status.judgement``: what the one judgement decided (:func:`spx.analysis.judge.judge`) and the words every
    reader prints — ``spx report``, ``spx gate``, the CR's printer columns and the metrics read these, never judge
    again. Set on every terminal status with a judgement (a verdict, or a run that stopped early)."""

    decided_by: DecidedBy | None = Field(
        default=None, description=f"Which measurement decided status.verdict: {one_of(DECIDED_BY, DECIDED_BY_MEANINGS)}.")
    recommended_threshold_tokens: int | None = Field(default=None, gt=0)
    """The deciding measurement's recommended threshold (tokens): the step curve's where the step decided, the
    larger of both kernel regimes' where they agree, the GPU-bound regime's with one regime; unset where nothing decided."""
    expected_effect: StepExpectation | None = None
    """The step A/B's expected effect of splitting from gate.thresholdTokens over the batch mix, where the step decided."""
    bottom_line: str | None = Field(default=None, max_length=2048)
    """The report's bottom line: from the deciding measurement, stating T and T + 1 and the expected effect."""
    next_step: str | None = Field(default=None, max_length=1024)
    """What to run next when no measurement decided (never a threshold the deployment cannot reach)."""
    notes: list[str] = Field(default_factory=list, max_length=8)
    """One line per contradiction the verdict overrides (a kernel regime against the deciding step A/B)."""
    stopped: list[str] = Field(default_factory=list, max_length=8)
    """Stages that stopped early (a signal, a crash, vLLM missing) in a run whose spec asked for them: then there
    is no verdict (phase Failed), whatever the stages that finished say."""
    refused: list[str] = Field(default_factory=list, max_length=8)
    """Bench documents not judged with this run: of another experiment, spec (hash) or run."""
    cpu: bool = False
    """A CPU smoke run: its timings say nothing about GPUs (a Pass or Fail on them needs gate.allowCpuTimings)."""
    cpu_timings_allowed: bool = False
    """The run's gate.allowCpuTimings: spx gate trusts a CPU smoke run's Pass only when true."""


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
    step: StepStatus | None = None
    """Outcome of the step A/B: the split's measured effect on a whole prefill step per threshold."""
    judgement: JudgementStatus | None = None
    """What decided the verdict, the recommended threshold, the expected effect, the bottom line and the next step."""
    verdict: Verdict | None = Field(
        default=None, description=f"{one_of(VERDICTS)}; set only when Decided is True with one of those reasons.")
    verdict_reasons: list[str] = Field(default_factory=list)
    """Why the verdict is what it is, most important first."""
    result_config_map: str | None = None
    """ConfigMap holding the full result document, the pod log and the raw outputs."""
