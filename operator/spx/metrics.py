"""Prometheus collectors of the operator (served on ``:8080/metrics``): one module, one list.

Label sets are bounded: ``namespace``/``experiment`` are the live experiments (series of a deleted
experiment are removed), ``candidate`` ∈ {replicated, split}, ``tokens`` ∈ the sweep (≤ 64 values),
``gpu``/``vllm`` come from the fingerprint, ``phase``/``verdict`` are enums.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

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

# Update / remove ------------------------------------------------------------------------------------
#
# The controller calls :func:`observe_experiment` after every status it writes (and for every
# experiment it sees at startup, so a restarted operator re-exports the last results), and
# :func:`forget_experiment` when an experiment is deleted. Each experiment's series are remembered so
# the stale ones (another GPU label after a new run, the previous phase) are removed, not left behind.

_LOCK = threading.Lock()
#: (namespace, experiment) → [(collector, label values, value), …] of the series currently exported.
_SERIES: dict[tuple[str, str], list[tuple[Any, tuple[str, ...], float]]] = {}
#: (namespace, experiment) → (phase, since): the phase counted in ``spx_experiments``.
_PHASES: dict[tuple[str, str], tuple[str, float]] = {}
_PHASE_COUNTS: dict[str, int] = dict.fromkeys(PHASES, 0)


def _fmt_tokens(tokens: int) -> str:
    return str(int(tokens))


def _remove(collector: Any, labels: tuple[str, ...]) -> None:
    try:
        collector.remove(*labels)
    except KeyError:  # already gone
        pass


def _set_phase_locked(key: tuple[str, str], phase: str | None, now: float) -> None:
    old = _PHASES.get(key)
    if old is not None and old[0] == phase:
        return
    if old is not None:
        _remove(PHASE_SINCE, (*key, old[0]))
        del _PHASES[key]
        _PHASE_COUNTS[old[0]] = _PHASE_COUNTS.get(old[0], 1) - 1
        EXPERIMENTS.labels(old[0]).set(_PHASE_COUNTS[old[0]])
    if phase is not None:
        _PHASES[key] = (phase, now)
        PHASE_SINCE.labels(*key, phase).set(now)
        _PHASE_COUNTS[phase] = _PHASE_COUNTS.get(phase, 0) + 1
        EXPERIMENTS.labels(phase).set(_PHASE_COUNTS[phase])


def observe_experiment(namespace: str, name: str, status: Mapping[str, Any] | None, phase_since: float | None = None) -> None:
    """Export an experiment's status (the camelCase ``.status`` dict) as gauges.

    Latency per candidate and token count, speedup per token count, crossover, recommended threshold
    and the verdict (1 for the current one, 0 for the others) — labelled with the GPU and vLLM
    version from the fingerprint — plus the phase counts. Series the new status no longer has are
    removed; an unchanged status costs a comparison.
    """
    key = (namespace, name)
    status = status or {}
    env = status.get("environment") or {}
    gpu = str(env.get("gpu") or "")
    vllm = str(env.get("vllm") or "")
    kernel = status.get("kernel") or {}
    wanted: list[tuple[Any, tuple[str, ...], float]] = []
    for p in kernel.get("points") or []:
        tokens = _fmt_tokens(p.get("tokens", 0))
        if p.get("replicatedUs") is not None:
            wanted.append((KERNEL_LATENCY, (namespace, name, "replicated", tokens, gpu), float(p["replicatedUs"])))
        if p.get("splitUs") is not None:
            wanted.append((KERNEL_LATENCY, (namespace, name, "split", tokens, gpu), float(p["splitUs"])))
        if p.get("speedup") is not None:
            wanted.append((KERNEL_SPEEDUP, (namespace, name, tokens, gpu), float(p["speedup"])))
    if kernel.get("crossoverTokens") is not None:
        wanted.append((CROSSOVER, (namespace, name, gpu, vllm), float(kernel["crossoverTokens"])))
    if kernel.get("recommendedThresholdTokens") is not None:
        wanted.append((RECOMMENDED_THRESHOLD, (namespace, name, gpu, vllm), float(kernel["recommendedThresholdTokens"])))
    verdict = status.get("verdict")
    if verdict in VERDICTS:
        for v in VERDICTS:
            wanted.append((VERDICT, (namespace, name, gpu, vllm, v), 1.0 if v == verdict else 0.0))
    with _LOCK:
        previous = _SERIES.get(key)
        if previous != wanted:
            keep = {(id(c), labels) for c, labels, _ in wanted}
            for collector, labels, _ in previous or []:
                if (id(collector), labels) not in keep:
                    _remove(collector, labels)
            for collector, labels, value in wanted:
                collector.labels(*labels).set(value)
            _SERIES[key] = wanted
        _set_phase_locked(key, status.get("phase"), phase_since if phase_since is not None else time.time())


def forget_experiment(namespace: str, name: str) -> None:
    """Remove every series of a deleted experiment."""
    key = (namespace, name)
    with _LOCK:
        for collector, labels, _ in _SERIES.pop(key, []):
            _remove(collector, labels)
        _set_phase_locked(key, None, time.time())


def observe_duration(seconds: float) -> None:
    """One experiment reached a terminal phase after ``seconds`` since its Job was created."""
    if seconds >= 0:
        EXPERIMENT_DURATION.observe(seconds)


def count_reconcile(handler: str, outcome: str) -> None:
    RECONCILES.labels(handler, outcome).inc()
    LAST_RECONCILE.set(time.time())


def count_error(handler: str) -> None:
    RECONCILE_ERRORS.labels(handler).inc()


def reset() -> None:
    """Forget all experiment series (tests)."""
    with _LOCK:
        keys = list(_SERIES)
    for ns, name in keys:
        forget_experiment(ns, name)
    with _LOCK:
        for key in list(_PHASES):
            _set_phase_locked(key, None, time.time())


def exposition() -> bytes:
    """The text exposition of :data:`REGISTRY` (what ``/metrics`` serves)."""
    return generate_latest(REGISTRY)


for _phase in PHASES:  # export zeros from the start so dashboards and alerts see every phase
    EXPERIMENTS.labels(_phase).set(0)
