"""The collectors the operator serves on ``:8080/metrics`` (:data:`REGISTRY`): one list, one place.

Label sets are bounded: ``namespace``/``experiment`` are the live experiments (series of a deleted
experiment are removed), ``candidate`` ∈ {replicated, split}, ``tokens`` ∈ the sweep (≤ 64 values),
``gpu``/``vllm`` come from the fingerprint, ``phase``/``verdict`` are enums; crossover and threshold
series carry :data:`COMPARABLE_LABELS` (:mod:`spx.controller.metrics.comparable`); for the serving A/B,
``point`` ∈ ``spec.serving.points`` (≤ 64 names), ``metric`` an enum, ``variant`` ∈ {main, split}.
Values are in base units (``promtool check metrics`` finds nothing): latencies in seconds, ratios 0–1
(Prometheus' naming guide: ``_ratio``, never percent). Besides the experiments' series the registry
carries the process and Python runtime collectors (``process_*``, ``python_gc_*``, ``python_info``),
the reconcile-duration histogram and the work-queue depth.
"""

from __future__ import annotations

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from spx import vocabulary

# No `*_created` series: one extra series per counter and histogram child that no rule or panel
# reads (prometheus_client's own switch; PROMETHEUS_DISABLE_CREATED_SERIES does the same).
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry(auto_describe=True)
# process_* (CPU seconds, resident memory, open fds, start time), python_gc_*, python_info: the same
# collectors prometheus_client registers on its default registry, which /metrics does not serve.
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_collector)

EXPERIMENT_LABELS = ("namespace", "experiment")
#: What makes two crossovers comparable (the crossover-shift alert and the history panels group by
#: them), each the *what* of a measurement, never how many points it took: the fingerprint (GPU,
#: driver, vLLM), the GEMM backend (Humming and cuBLAS cross over ~10× apart on the same H200), where
#: the gather time came from (measured or modelled), the execution mode, the device (cpu = a smoke run,
#: excluded from the alert), the tensor-parallel size (``tp``: each rank's shard is tokens/TP rows),
#: the projection's shape (``projection``: ``<hidden>x<out>+<out>``) and the requested sweep grid
#: (``sweep``: ``<first>-<last>x<count>`` of the grid asked for, without the points an adaptive sweep
#: added: the interpolated crossover moves with the grid, 89 vs 216 tokens for the coarse and dense
#: Humming sweeps of examples/results/h200-1gpu, but two refinements of one grid are the same design).
COMPARABLE_LABELS = ("gpu", "driver", "vllm", "gemm_backend", "gather_source", "execution_mode", "device",
                     "tp", "projection", "sweep")


def _gauge(name: str, documentation: str, labels: tuple[str, ...] = ()) -> Gauge:
    """A gauge of :data:`REGISTRY` (what ``/metrics`` serves)."""
    return Gauge(name, documentation, labels, registry=REGISTRY)


KERNEL_LATENCY = _gauge(
    "spx_kernel_latency_seconds",
    "Median seconds per call of the projection, max over ranks, per candidate and token count.",
    (*EXPERIMENT_LABELS, "candidate", "tokens", "gpu"),
)
KERNEL_SPEEDUP = _gauge(
    "spx_kernel_speedup_ratio",
    "Replicated latency over split latency per token count (> 1: splitting by token wins).",
    (*EXPERIMENT_LABELS, "tokens", "gpu"),
)
CROSSOVER = _gauge(
    "spx_crossover_tokens",
    "Interpolated break-even token count where split starts to win.",
    (*EXPERIMENT_LABELS, *COMPARABLE_LABELS),
)
RECOMMENDED_THRESHOLD = _gauge(
    "spx_recommended_threshold_tokens",
    "Recommended _SHARD_FUSED_WQA_WKV_MIN_TOKENS of the measurement that decided the verdict (the step A/B's "
    "when it decided, else the kernel sweep's).",
    (*EXPERIMENT_LABELS, *COMPARABLE_LABELS),
)
HOST_BOUND_CROSSOVER = _gauge(
    "spx_host_bound_crossover_tokens",
    "Interpolated break-even (tokens) in the host-bound regime (eager points' host issue times: the split moves the step by Δh).",
    (*EXPERIMENT_LABELS, *COMPARABLE_LABELS),
)
HOST_BOUND_THRESHOLD = _gauge(
    "spx_host_bound_recommended_threshold_tokens",
    "Recommended _SHARD_FUSED_WQA_WKV_MIN_TOKENS in the host-bound regime (same threshold rule).",
    (*EXPERIMENT_LABELS, *COMPARABLE_LABELS),
)
KERNEL_HOST_BOUND_SPEEDUP = _gauge(
    "spx_kernel_host_bound_speedup_ratio",
    "Replicated / split host issue time per eager token count (> 1: the split wins in the host-bound regime).",
    (*EXPERIMENT_LABELS, "tokens", "gpu"),
)
VERDICT = _gauge(
    "spx_verdict",
    "1 for the experiment's current gate verdict (Pass, Fail, Inconclusive), 0 for the others; decided_by: "
    "the measurement that decided it (status.kernel.decidedBy).",
    (*EXPERIMENT_LABELS, "gpu", "vllm", "decided_by", "verdict"),
)
REGIME_VERDICT = _gauge(
    "spx_regime_verdict",
    "1 for a kernel regime's own verdict (gpu-bound: GPU spans, host-bound: eager host issue times), 0 for the others.",
    (*EXPERIMENT_LABELS, "regime", "verdict"),
)
REGIME_CROSSOVER = _gauge(
    "spx_regime_crossover_tokens",
    "Interpolated break-even (tokens) in one kernel regime; absent when the regime has none.",
    (*EXPERIMENT_LABELS, "regime"),
)
REGIME_THRESHOLD = _gauge(
    "spx_regime_recommended_threshold_tokens",
    "The threshold one kernel regime's times support (not the verdict's unless that regime decided).",
    (*EXPERIMENT_LABELS, "regime"),
)
KERNEL_DELTA = _gauge(
    "spx_kernel_delta_seconds",
    "The split's difference per call (one call per layer) at a token count: delta=gpu is Δg (GPU spans), "
    "delta=host is Δh (host issue times); bound: estimate or an end of its 95 % interval. Negative: the split saves.",
    (*EXPERIMENT_LABELS, "tokens", "delta", "bound"),
)
STEP_EFFECT = _gauge(
    "spx_step_effect_seconds",
    "Step A/B: an arm's effect on a whole prefill step at a prompt length (arm minus replicated, seconds per step; "
    "negative: a gain); path aligned (length % TP == 0) or pad; bound: estimate or an interval end.",
    (*EXPERIMENT_LABELS, "arm", "length", "path", "bound"),
)
STEP_EFFECT_PER_LAYER = _gauge(
    "spx_step_effect_per_layer_seconds",
    "Step A/B: spx_step_effect_seconds divided by the layers running the projection (seconds per layer).",
    (*EXPERIMENT_LABELS, "arm", "length", "path", "bound"),
)
STEP_OUTCOME = _gauge(
    "spx_step_outcome",
    "Step A/B: 1 for what an arm's effect interval at a length says (gain, loss, indifferent); one series per point.",
    (*EXPERIMENT_LABELS, "arm", "length", "path", "outcome"),
)
STEP_EXPECTED = _gauge(
    "spx_step_expected_effect_seconds",
    "Step A/B: the expected effect of splitting from a threshold over the deployment's batch mix (seconds per step).",
    (*EXPERIMENT_LABELS, "threshold", "arm", "bound"),
)
STEP_EXPECTED_PER_LAYER = _gauge(
    "spx_step_expected_effect_per_layer_seconds",
    "Step A/B: spx_step_expected_effect_seconds per layer (seconds per layer).",
    (*EXPERIMENT_LABELS, "threshold", "arm", "bound"),
)
STEP_BREAK_EVEN = _gauge(
    "spx_step_break_even_tokens",
    "Step A/B: where the split's mix-weighted effect crosses from loss to gain on the curve (tokens).",
    EXPERIMENT_LABELS,
)
STEP_USABLE = _gauge(
    "spx_step_usable",
    "Step A/B: 1 when it may decide (complete, calibrated, confirmed, this experiment's), 0 when not.",
    EXPERIMENT_LABELS,
)
SERVING_VALUE = _gauge(
    "spx_serving_value",
    "Serving A/B: mean over a variant's arms of a point's compared value (latencies in seconds, "
    "throughputs in tokens or requests per second, as the metric label says).",
    (*EXPERIMENT_LABELS, "point", "metric", "variant"),
)
SERVING_CHANGE = _gauge(
    "spx_serving_change_ratio",
    "Serving A/B: (split mean - main mean) / main mean per point, as a ratio (-0.05: 5 % lower; negative TTFT is better).",
    (*EXPERIMENT_LABELS, "point", "metric"),
)
SERVING_GATE = _gauge(
    "spx_serving_gate_passed",
    "Serving A/B gate: 1 passed, 0 failed; absent while undecided or inconclusive.",
    EXPERIMENT_LABELS,
)
ACCURACY = _gauge(
    "spx_accuracy_ratio",
    "GSM8K accuracy as a 0-1 ratio of problems solved, mean over a variant's arms.",
    (*EXPERIMENT_LABELS, "variant"),
)
ACCURACY_DROP = _gauge(
    "spx_accuracy_drop_ratio",
    "GSM8K: main accuracy minus split accuracy, as a 0-1 ratio (0.01 = 1 percentage point; positive: the split is worse).",
    EXPERIMENT_LABELS,
)
ACCURACY_MAX_DROP = _gauge(
    "spx_accuracy_max_drop_ratio",
    "GSM8K gate: the largest drop the experiment allows (spec.accuracy.maxDropPoints / 100).",
    EXPERIMENT_LABELS,
)
EXPERIMENTS = _gauge(
    "spx_experiments",
    "Number of experiments per phase.",
    ("phase",),
)
EXPERIMENT_DURATION = Histogram(
    "spx_experiment_duration_seconds",
    "Wall time from Job creation to a terminal phase.",
    buckets=(60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, float("inf")),
    registry=REGISTRY,
)
TIMEOUT = _gauge(
    "spx_experiment_timeout_seconds",
    "The experiment's spec.timeoutSeconds: the deadline of its Job (a Running experiment within it is not stuck).",
    EXPERIMENT_LABELS,
)
PHASE_SINCE = _gauge(
    "spx_experiment_phase_since_timestamp_seconds",
    "Unix time at which the experiment entered its current phase (1 series per experiment).",
    (*EXPERIMENT_LABELS, "phase"),
)
RECONCILES = Counter(
    "spx_reconcile",
    "Reconcile handler invocations by handler and outcome.",
    ("handler", "outcome"),
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "spx_reconcile_errors",
    "Reconcile handler invocations that raised, by handler.",
    ("handler",),
    registry=REGISTRY,
)
LAST_RECONCILE = _gauge(
    "spx_last_reconcile_timestamp_seconds",
    "Unix time of this replica's last completed reconcile (0: none yet, e.g. a standby that never led); "
    "alerts take the max over replicas.",
)
#: Seconds one reconcile of one experiment takes (decide + API writes), by handler and outcome.
#: Buckets: a decision without API calls is ~1 ms, one with a Job create and a status patch tens of
#: ms; a slow API server or a large result log shows up in the seconds buckets.
RECONCILE_SECONDS = Histogram(
    "spx_reconcile_duration_seconds",
    "Wall time of one reconcile of one experiment (decision and API writes), by handler and outcome.",
    ("handler", "outcome"),
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, float("inf")),
    registry=REGISTRY,
)
#: Experiments waiting for a reconcile worker (the work queue's length; not the Queued phase).
WORKQUEUE_DEPTH = _gauge(
    "spx_workqueue_depth",
    "Experiments waiting in the operator's work queue for a reconcile worker.",
)

#: The label values of ``spx_experiments`` / ``spx_verdict`` (:mod:`spx.vocabulary`).
PHASES = vocabulary.PHASES
VERDICTS = vocabulary.VERDICTS

for _phase in PHASES:  # export zeros from the start so dashboards and alerts see every phase
    EXPERIMENTS.labels(_phase).set(0)
