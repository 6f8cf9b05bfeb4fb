"""An experiment's series: :func:`observe_experiment` after every status the controller writes (and for
every experiment it sees at startup, so a restarted operator re-exports the last results),
:func:`forget_experiment` when it is deleted.

Each experiment's series are remembered so the stale ones (another GPU label after a new run, the
previous phase) are removed, not left behind. The status is read through
:class:`spx.api.status.ExperimentStatus`; µs, percent and ms of the status become seconds and 0–1 ratios.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from spx.api.serving import LATENCY_METRICS
from spx.api.spec import ExperimentSpec
from spx.api.status import ExperimentStatus, KernelStatus
from spx.controller.metrics import registry as r
from spx.controller.metrics.comparable import comparable_values, spec_model, status_model
from spx.controller.metrics.decided import decided_by, decided_series, deciding_threshold

#: (collector, label values, value) of one exported series.
Series = tuple[Any, tuple[str, ...], float]

_LOCK = threading.Lock()
#: (namespace, experiment) → the series currently exported.
_SERIES: dict[tuple[str, str], list[Series]] = {}
#: (namespace, experiment) → (phase, since): the phase counted in ``spx_experiments``.
_PHASES: dict[tuple[str, str], tuple[str, float]] = {}
_PHASE_COUNTS: dict[str, int] = dict.fromkeys(r.PHASES, 0)
#: Seconds after its decision an experiment's own value series stop being exported (0: never);
#: the operator sets it from SPX_SERIES_RETENTION_SECONDS (:func:`set_series_retention`). Its phase
#: series (spx_experiment_phase_since_timestamp_seconds) and the phase counts stay while it exists.
_series_retention_s = 0.0


def set_series_retention(seconds: float) -> None:
    """Stop exporting the value series of experiments decided more than ``seconds`` ago (0: never)."""
    global _series_retention_s
    _series_retention_s = max(0.0, float(seconds))


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
        _remove(r.PHASE_SINCE, (*key, old[0]))
        del _PHASES[key]
        _PHASE_COUNTS[old[0]] = _PHASE_COUNTS.get(old[0], 1) - 1
        r.EXPERIMENTS.labels(old[0]).set(_PHASE_COUNTS[old[0]])
    if phase is not None:
        _PHASES[key] = (phase, now)
        r.PHASE_SINCE.labels(*key, phase).set(now)
        _PHASE_COUNTS[phase] = _PHASE_COUNTS.get(phase, 0) + 1
        r.EXPERIMENTS.labels(phase).set(_PHASE_COUNTS[phase])


def _kernel_series(key: tuple[str, str], status: ExperimentStatus, spec: ExperimentSpec | None) -> list[Series]:
    """Latency per candidate and token count (s), speedups, and the crossovers/thresholds labelled with
    all of ``COMPARABLE_LABELS``."""
    gpu = str((status.environment and status.environment.gpu) or "")
    kernel = status.kernel or KernelStatus()
    out: list[Series] = []
    for p in kernel.points:
        tokens = str(int(p.tokens))
        out.append((r.KERNEL_LATENCY, (*key, "replicated", tokens, gpu), p.replicated_us / 1e6))
        out.append((r.KERNEL_LATENCY, (*key, "split", tokens, gpu), p.split_us / 1e6))
        out.append((r.KERNEL_SPEEDUP, (*key, tokens, gpu), p.speedup))
        if p.replicated_host_us and p.split_host_us and p.execution != "graph":
            out.append((r.KERNEL_HOST_BOUND_SPEEDUP, (*key, tokens, gpu), p.replicated_host_us / p.split_host_us))
    comparable = (*key, *comparable_values(status, spec))
    host = next((g for g in kernel.regimes if g.regime == "host-bound"), None)
    values: tuple[tuple[Any, float | int | None], ...] = (
        (r.CROSSOVER, kernel.crossover_tokens),
        (r.RECOMMENDED_THRESHOLD, deciding_threshold(status)),
        (r.HOST_BOUND_CROSSOVER, host.crossover_tokens if host is not None else None),
        (r.HOST_BOUND_THRESHOLD, host.recommended_threshold_tokens if host is not None else None))
    for collector, value in values:
        if value is not None:
            out.append((collector, comparable, float(value)))
    return out


def _vllm_series(key: tuple[str, str], status: ExperimentStatus) -> list[Series]:
    """Series of ``status.serving`` (per point: each variant's mean and the change; the gate) and
    ``status.accuracy`` (each variant's accuracy, the drop and its bound)."""
    out: list[Series] = []
    if (serving := status.serving) is not None:
        for p in serving.points:
            scale = 1e-3 if p.metric in LATENCY_METRICS else 1.0  # latencies: ms in the status, s here
            for variant, mean in (("main", p.main_mean), ("split", p.split_mean)):
                if mean is not None:
                    out.append((r.SERVING_VALUE, (*key, p.name, str(p.metric), variant), mean * scale))
            if p.change_pct is not None:
                out.append((r.SERVING_CHANGE, (*key, p.name, str(p.metric)), p.change_pct / 100))
        if serving.gate_passed is not None:
            out.append((r.SERVING_GATE, key, 1.0 if serving.gate_passed else 0.0))
    if (accuracy := status.accuracy) is not None:
        # the status speaks percent and percentage points (as GSM8K papers do); metrics 0-1 ratios
        for collector, labels, pct in ((r.ACCURACY, (*key, "main"), accuracy.main_pct),
                                       (r.ACCURACY, (*key, "split"), accuracy.split_pct),
                                       (r.ACCURACY_DROP, key, accuracy.drop_points),
                                       (r.ACCURACY_MAX_DROP, key, accuracy.max_drop_points)):
            if pct is not None:
                out.append((collector, labels, pct / 100))
    return out


def observe_experiment(
    namespace: str,
    name: str,
    status: ExperimentStatus | Mapping[str, Any] | None,
    phase_since: float | None = None,
    timeout_seconds: float | None = None,
    spec: ExperimentSpec | Mapping[str, Any] | None = None,
) -> None:
    """Export an experiment's status (the model, or its camelCase wire dict) as gauges.

    Latency per candidate and token count, speedup per token count, crossover, recommended threshold
    and the verdict (1 for the current one, 0 for the others) — labelled with the GPU and vLLM
    version from the fingerprint, crossover and threshold with all of ``COMPARABLE_LABELS`` (``spec``,
    the experiment's spec, names the gather model, TP size, projection and grid) — the serving A/B and
    GSM8K sections, ``timeout_seconds`` (the spec's Job deadline) when given, plus the phase counts.
    Series the new status no longer has are removed; an unchanged status costs a comparison.
    """
    key = (namespace, name)
    s = status_model(status)
    wanted = _kernel_series(key, s, spec_model(spec)) + _vllm_series(key, s) + decided_series(key, s)
    if timeout_seconds is not None:
        wanted.append((r.TIMEOUT, key, float(timeout_seconds)))
    if s.verdict is not None:
        env = s.environment
        gpu, vllm = str((env and env.gpu) or ""), str((env and env.vllm) or "")
        by = decided_by(s)
        wanted += [(r.VERDICT, (*key, gpu, vllm, by, v), 1.0 if v == s.verdict else 0.0) for v in r.VERDICTS]
    if _series_retention_s > 0 and phase_since is not None and time.time() - phase_since > _series_retention_s:
        wanted = []  # decided long ago: its series expire (SPX_SERIES_RETENTION_SECONDS)
    phase = s.phase if status else None  # no status yet: not counted in any phase
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
        _set_phase_locked(key, phase, phase_since if phase_since is not None else time.time())


def forget_experiment(namespace: str, name: str) -> None:
    """Remove every series of a deleted experiment."""
    key = (namespace, name)
    with _LOCK:
        for collector, labels, _ in _SERIES.pop(key, []):
            _remove(collector, labels)
        _set_phase_locked(key, None, time.time())


def reset() -> None:
    """Forget all experiment series (tests)."""
    with _LOCK:
        keys = list(_SERIES) + [k for k in _PHASES if k not in _SERIES]
    for ns, name in keys:
        forget_experiment(ns, name)
