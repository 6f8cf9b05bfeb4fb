"""Prometheus collectors of the operator (served on ``:8080/metrics``): one module, one list.

Label sets are bounded: ``namespace``/``experiment`` are the live experiments (series of a deleted
experiment are removed), ``candidate`` ∈ {replicated, split}, ``tokens`` ∈ the sweep (≤ 64 values),
``gpu``/``vllm`` come from the fingerprint, ``phase``/``verdict`` are enums.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

EXPERIMENT_LABELS = ("namespace", "experiment")

KERNEL_LATENCY = Gauge(
    "spx_kernel_latency_microseconds",
    "Median µs per call of the projection, max over ranks, per candidate and token count.",
    (*EXPERIMENT_LABELS, "candidate", "tokens", "gpu"),
    registry=REGISTRY,
)
KERNEL_SPEEDUP = Gauge(
    "spx_kernel_speedup_ratio",
    "Replicated µs over split µs per token count (> 1: splitting by token wins).",
    (*EXPERIMENT_LABELS, "tokens", "gpu"),
    registry=REGISTRY,
)
CROSSOVER = Gauge(
    "spx_crossover_tokens",
    "Interpolated break-even token count where split starts to win.",
    (*EXPERIMENT_LABELS, "gpu", "vllm"),
    registry=REGISTRY,
)
RECOMMENDED_THRESHOLD = Gauge(
    "spx_recommended_threshold_tokens",
    "Recommended _SHARD_FUSED_WQA_WKV_MIN_TOKENS from the measured crossover.",
    (*EXPERIMENT_LABELS, "gpu", "vllm"),
    registry=REGISTRY,
)
VERDICT = Gauge(
    "spx_verdict",
    "1 for the experiment's current gate verdict (Pass, Fail, Inconclusive), 0 for the others.",
    (*EXPERIMENT_LABELS, "gpu", "vllm", "verdict"),
    registry=REGISTRY,
)
EXPERIMENTS = Gauge(
    "spx_experiments",
    "Number of experiments per phase.",
    ("phase",),
    registry=REGISTRY,
)
EXPERIMENT_DURATION = Histogram(
    "spx_experiment_duration_seconds",
    "Wall time from Job creation to a terminal phase.",
    buckets=(60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, float("inf")),
    registry=REGISTRY,
)
PHASE_SINCE = Gauge(
    "spx_experiment_phase_since_timestamp_seconds",
    "Unix time at which the experiment entered its current phase (1 series per experiment).",
    (*EXPERIMENT_LABELS, "phase"),
    registry=REGISTRY,
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
LAST_RECONCILE = Gauge(
    "spx_last_reconcile_timestamp_seconds",
    "Unix time of the operator's last completed reconcile (operator liveness for alerts).",
    registry=REGISTRY,
)

PHASES = ("Pending", "Queued", "Running", "Analyzing", "Succeeded", "Failed")
VERDICTS = ("Pass", "Fail", "Inconclusive")
