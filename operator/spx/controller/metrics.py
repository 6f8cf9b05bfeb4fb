"""Prometheus collectors of the operator (served on ``:8080/metrics``): one module, one list.

Label sets are bounded: ``namespace``/``experiment`` are the live experiments (series of a deleted
experiment are removed), ``candidate`` ∈ {replicated, split}, ``tokens`` ∈ the sweep (≤ 64 values),
``gpu``/``vllm`` come from the fingerprint, ``phase``/``verdict`` are enums; for the serving A/B,
``point`` ∈ ``spec.serving.points`` (≤ 64 names), ``metric`` an enum, ``variant`` ∈ {main, split}.
Values are in base units (``promtool check metrics`` finds nothing): latencies in seconds, ratios
0–1 (Prometheus' naming guide: ``_ratio``, never percent). Besides the experiments' series the
registry carries the process and Python runtime collectors (``process_*``, ``python_gc_*``,
``python_info``), the reconcile-duration histogram and the work-queue depth.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from spx import vocabulary
from spx.api.serving import LATENCY_METRICS

# No `*_created` series: one extra series per counter and histogram child that no rule or panel
# reads (prometheus_client's own switch; PROMETHEUS_DISABLE_CREATED_SERIES does the same).
disable_created_metrics()
REGISTRY = CollectorRegistry(auto_describe=True)
# process_* (CPU seconds, resident memory, open fds, start time), python_gc_*, python_info: the same
# collectors prometheus_client registers on its default registry, which /metrics does not serve.
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_collector)

EXPERIMENT_LABELS = ("namespace", "experiment")


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
#: What makes two crossovers comparable (the crossover-shift alert and the history panels group by
#: them): the fingerprint (GPU, driver, vLLM), the GEMM backend (Humming and cuBLAS cross over ~10×
#: apart on the same H200), where the gather time came from (measured or modelled), the execution
#: mode, the device (cpu = a smoke run, excluded from the alert) and the sweep (``<first>-<last>x<count>``
#: token counts: the interpolated crossover moves with the grid, 89 vs 216 tokens for the coarse and
#: dense Humming sweeps of examples/results/h200-1gpu).
COMPARABLE_LABELS = ("gpu", "driver", "vllm", "gemm_backend", "gather_source", "execution_mode", "device", "sweep")
CROSSOVER = _gauge(
    "spx_crossover_tokens",
    "Interpolated break-even token count where split starts to win.",
    (*EXPERIMENT_LABELS, *COMPARABLE_LABELS),
)
RECOMMENDED_THRESHOLD = _gauge(
    "spx_recommended_threshold_tokens",
    "Recommended _SHARD_FUSED_WQA_WKV_MIN_TOKENS from the measured crossover.",
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
    "1 for the experiment's current gate verdict (Pass, Fail, Inconclusive), 0 for the others.",
    (*EXPERIMENT_LABELS, "gpu", "vllm", "verdict"),
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
    "Unix time of the operator's last completed reconcile (operator liveness for alerts).",
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

#: The label values of ``spx_phase`` / ``spx_verdict`` (:mod:`spx.vocabulary`).
PHASES = vocabulary.PHASES
VERDICTS = vocabulary.VERDICTS

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


def _seconds(microseconds: Any) -> float:
    """Status fields are in µs (``replicatedUs``); metrics use base units (seconds)."""
    return float(microseconds) / 1e6


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


def gather_source(kernel: Mapping[str, Any], spec: Mapping[str, Any] | None) -> str:
    """``measured``, or for a modelled gather ``modelled/<prior>`` (``modelled/explicit`` with
    ``latencyUs``/``busBandwidthGbps`` set): a modelled crossover is partly the model's output, so
    runs under different gather models are not comparable (89 vs 940 tokens for the same Humming
    samples under the H20-calibrated and the datasheet prior)."""
    source = str(kernel.get("gatherSource") or "")
    if source != "modelled" or spec is None:
        return source
    model = ((spec.get("kernel") or {}).get("gatherModel")) or {}
    if model.get("latencyUs") is not None or model.get("busBandwidthGbps") is not None:
        return "modelled/explicit"
    return f"modelled/{model.get('prior') or 'h20-calibrated'}"


def execution_mode(kernel: Mapping[str, Any], spec: Mapping[str, Any] | None = None) -> str:
    """How the sweep was timed: the spec's ``kernel.execution`` (auto, graph, eager) when given, else
    from the points' ``execution`` (``graph``, ``eager``, or ``auto`` when both occur); "" when unknown."""
    requested = ((spec or {}).get("kernel") or {}).get("execution")
    if requested:
        return str(requested)
    modes = {str(p["execution"]) for p in kernel.get("points") or [] if p.get("execution")}
    return "auto" if len(modes) > 1 else next(iter(modes), "")


def comparable_values(status: Mapping[str, Any], spec: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The :data:`COMPARABLE_LABELS` values of an experiment's ``.status`` (camelCase dict); "" where unknown.

    ``gather_source``: :func:`gather_source` (the gather model from ``spec``, the experiment's
    camelCase spec, when given); ``execution_mode``: :func:`execution_mode`; ``device``: ``status.environment.device`` (cuda or cpu); ``sweep``:
    ``<first>-<last>x<count>`` of the measured token counts.
    """
    env = status.get("environment") or {}
    kernel = status.get("kernel") or {}
    tokens = [int(p["tokens"]) for p in kernel.get("points") or [] if p.get("tokens") is not None]
    sweep = f"{min(tokens)}-{max(tokens)}x{len(tokens)}" if tokens else ""
    return (
        str(env.get("gpu") or ""), str(env.get("driver") or ""), str(env.get("vllm") or ""),
        str(kernel.get("gemmBackend") or ""), gather_source(kernel, spec),
        execution_mode(kernel, spec), str(env.get("device") or ""), sweep,
    )


#: Seconds after its decision an experiment's own value series stop being exported (0: never);
#: the operator sets it from SPX_SERIES_RETENTION_SECONDS (:func:`set_series_retention`). Its phase
#: series (spx_experiment_phase_since_timestamp_seconds) and the phase counts stay while it exists.
_series_retention_s = 0.0


def set_series_retention(seconds: float) -> None:
    """Stop exporting the value series of experiments decided more than ``seconds`` ago (0: never)."""
    global _series_retention_s
    _series_retention_s = max(0.0, float(seconds))


def observe_experiment(
    namespace: str,
    name: str,
    status: Mapping[str, Any] | None,
    phase_since: float | None = None,
    timeout_seconds: float | None = None,
    spec: Mapping[str, Any] | None = None,
) -> None:
    """Export an experiment's status (the camelCase ``.status`` dict) as gauges.

    Latency per candidate and token count, speedup per token count, crossover, recommended threshold
    and the verdict (1 for the current one, 0 for the others) — labelled with the GPU and vLLM
    version from the fingerprint, crossover and threshold with all of :data:`COMPARABLE_LABELS`
    (``spec``, the experiment's camelCase spec, names the gather model) — the serving A/B and GSM8K sections, ``timeout_seconds`` (the spec's
    Job deadline) when given, plus the phase counts. Series the new status no longer has are
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
            wanted.append((KERNEL_LATENCY, (namespace, name, "replicated", tokens, gpu), _seconds(p["replicatedUs"])))
        if p.get("splitUs") is not None:
            wanted.append((KERNEL_LATENCY, (namespace, name, "split", tokens, gpu), _seconds(p["splitUs"])))
        if p.get("speedup") is not None:
            wanted.append((KERNEL_SPEEDUP, (namespace, name, tokens, gpu), float(p["speedup"])))
        if p.get("replicatedHostUs") and p.get("splitHostUs") and p.get("execution") != "graph":
            wanted.append((KERNEL_HOST_BOUND_SPEEDUP, (namespace, name, tokens, gpu),
                           float(p["replicatedHostUs"]) / float(p["splitHostUs"])))
    comparable = (namespace, name, *comparable_values(status, spec))
    if kernel.get("crossoverTokens") is not None:
        wanted.append((CROSSOVER, comparable, float(kernel["crossoverTokens"])))
    if kernel.get("recommendedThresholdTokens") is not None:
        wanted.append((RECOMMENDED_THRESHOLD, comparable, float(kernel["recommendedThresholdTokens"])))
    host = next((r for r in kernel.get("regimes") or [] if r.get("regime") == "host-bound"), {})
    if host.get("crossoverTokens") is not None:
        wanted.append((HOST_BOUND_CROSSOVER, comparable, float(host["crossoverTokens"])))
    if host.get("recommendedThresholdTokens") is not None:
        wanted.append((HOST_BOUND_THRESHOLD, comparable, float(host["recommendedThresholdTokens"])))
    wanted += _vllm_series(namespace, name, status)
    if timeout_seconds is not None:
        wanted.append((TIMEOUT, (namespace, name), float(timeout_seconds)))
    verdict = status.get("verdict")
    if verdict in VERDICTS:
        for v in VERDICTS:
            wanted.append((VERDICT, (namespace, name, gpu, vllm, v), 1.0 if v == verdict else 0.0))
    if _series_retention_s > 0 and phase_since is not None and time.time() - phase_since > _series_retention_s:
        wanted = []  # decided long ago: its series expire (SPX_SERIES_RETENTION_SECONDS)
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


def _vllm_series(namespace: str, name: str, status: Mapping[str, Any]) -> list[tuple[Any, tuple[str, ...], float]]:
    """Series of ``status.serving`` (per point: each variant's mean and the change; the gate) and
    ``status.accuracy`` (each variant's accuracy, the drop and its bound)."""
    out: list[tuple[Any, tuple[str, ...], float]] = []
    serving = status.get("serving") or {}
    for p in serving.get("points") or []:
        point, metric = str(p.get("name") or ""), str(p.get("metric") or "")
        scale = 1e-3 if metric in LATENCY_METRICS else 1.0  # latencies: ms in the status, s here
        for variant, key in (("main", "mainMean"), ("split", "splitMean")):
            if p.get(key) is not None:
                out.append((SERVING_VALUE, (namespace, name, point, metric, variant), float(p[key]) * scale))
        if p.get("changePct") is not None:
            out.append((SERVING_CHANGE, (namespace, name, point, metric), float(p["changePct"]) / 100))
    if serving.get("gatePassed") is not None:
        out.append((SERVING_GATE, (namespace, name), 1.0 if serving["gatePassed"] else 0.0))
    accuracy = status.get("accuracy") or {}
    # the status speaks percent and percentage points (as GSM8K papers do); metrics 0-1 ratios
    for variant, key in (("main", "mainPct"), ("split", "splitPct")):
        if accuracy.get(key) is not None:
            out.append((ACCURACY, (namespace, name, variant), float(accuracy[key]) / 100))
    if accuracy.get("dropPoints") is not None:
        out.append((ACCURACY_DROP, (namespace, name), float(accuracy["dropPoints"]) / 100))
    if accuracy.get("maxDropPoints") is not None:
        out.append((ACCURACY_MAX_DROP, (namespace, name), float(accuracy["maxDropPoints"]) / 100))
    return out


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
    """Count one completed reconcile of ``handler`` and stamp ``spx_last_reconcile_timestamp_seconds``."""
    RECONCILES.labels(handler, outcome).inc()
    LAST_RECONCILE.set(time.time())


def observe_reconcile(handler: str, outcome: str, seconds: float) -> None:
    """One reconcile of ``handler`` that ended with ``outcome`` took ``seconds`` (monotonic clock)."""
    if seconds >= 0:
        RECONCILE_SECONDS.labels(handler, outcome).observe(seconds)


def set_workqueue_depth(depth: int) -> None:
    """The number of experiments waiting in the work queue now (set on every put and get)."""
    WORKQUEUE_DEPTH.set(max(0, depth))


def serve(port: int, address: str = "0.0.0.0") -> Any:
    """Serve :data:`REGISTRY` on ``http://address:port/metrics`` in a thread; returns what
    ``prometheus_client.start_http_server`` returns (``(server, thread)``: ``server.shutdown()``)."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=address, registry=REGISTRY)


#: Environment variable with the address the metrics endpoint binds (chart: metrics.bindAddress).
BIND_ADDRESS_ENV = "SPX_METRICS_BIND_ADDRESS"


def count_error(handler: str) -> None:
    """Count one reconcile of ``handler`` that raised."""
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
