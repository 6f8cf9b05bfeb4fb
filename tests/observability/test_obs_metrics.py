"""The operator's registry (spx.controller.metrics.REGISTRY, what /metrics serves): process and runtime
collectors, the reconcile-duration histogram, the work-queue depth, ratios in 0–1, and an exposition
promtool finds nothing wrong with."""

from __future__ import annotations

import subprocess
import urllib.request

import pytest

from spx.controller import metrics
from spx_testing.obslib import STEP_DECIDED, registry_series_names, require_binary, step_curve_contract


def _sample(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels or None)


def test_process_and_runtime_collectors_are_served() -> None:
    names = registry_series_names()
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "process_start_time_seconds", "python_gc_objects_collected_total", "python_info"):
        assert name in names, name
    assert (_sample("process_resident_memory_bytes") or 0) > 1e6  # a real reading of /proc, not a zero


def test_reconcile_duration_histogram_and_workqueue_depth() -> None:
    before = _sample("spx_reconcile_duration_seconds_count", handler="experiment", outcome="job-created") or 0
    metrics.observe_reconcile("experiment", "job-created", 0.004)
    metrics.observe_reconcile("experiment", "job-created", 2.0)
    metrics.observe_reconcile("experiment", "job-created", -1)  # a clock step: ignored
    assert _sample("spx_reconcile_duration_seconds_count", handler="experiment", outcome="job-created") == before + 2
    assert _sample("spx_reconcile_duration_seconds_bucket", handler="experiment", outcome="job-created", le="0.005") \
        >= before + 1
    metrics.set_workqueue_depth(7)
    assert _sample("spx_workqueue_depth") == 7
    metrics.set_workqueue_depth(-3)
    assert _sample("spx_workqueue_depth") == 0


def test_ratio_metrics_are_0_to_1() -> None:
    status = {"phase": "Succeeded",
              "serving": {"points": [{"name": "p", "metric": "output_throughput", "unit": "tok/s", "mainMean": 100.0, "splitMean": 104.0,
                                      "changePct": 4.0}]},
              "accuracy": {"mainPct": 95.0, "splitPct": 94.5, "dropPoints": 0.5, "maxDropPoints": 1.0}}
    try:
        metrics.observe_experiment("ml", "ratios", status)
        assert _sample("spx_serving_change_ratio", namespace="ml", experiment="ratios", point="p",
                       metric="output_throughput") == pytest.approx(0.04)
        assert _sample("spx_accuracy_ratio", namespace="ml", experiment="ratios", variant="main") == pytest.approx(0.95)
        assert _sample("spx_accuracy_drop_ratio", namespace="ml", experiment="ratios") == pytest.approx(0.005)
        assert _sample("spx_accuracy_max_drop_ratio", namespace="ml", experiment="ratios") == pytest.approx(0.01)
        assert not [n for n in registry_series_names() if "percent" in n]
    finally:
        metrics.forget_experiment("ml", "ratios")


def test_host_bound_crossover_threshold_and_speedup_are_exported() -> None:
    status = {"phase": "Succeeded", "environment": {"gpu": "NVIDIA H200", "driver": "580", "vllm": ""},
              "kernel": {"crossoverTokens": 228.2, "recommendedThresholdTokens": 256,
                         "regimes": [{"regime": "gpu-bound", "crossoverTokens": 228.2},
                                     {"regime": "host-bound", "crossoverTokens": 9434.2,
                                      "recommendedThresholdTokens": 16384}],
                         "points": [{"tokens": 2048, "rowsPerRank": 256, "replicatedUs": 64.0, "splitUs": 44.2,
                                     "speedup": 1.45, "execution": "eager", "replicatedHostUs": 255.1,
                                     "splitHostUs": 307.9, "hostDeltaUs": 52.8}]}}
    # crossover and threshold series carry every label that makes two crossovers comparable
    labels = dict(zip(("namespace", "experiment", *metrics.COMPARABLE_LABELS),
                      ("ml", "bounds", *metrics.comparable_values(status)), strict=True))
    assert labels["gpu"] == "NVIDIA H200" and labels["driver"] == "580" and labels["sweep"] == "2048-2048x1"
    try:
        metrics.observe_experiment("ml", "bounds", status)
        assert _sample("spx_recommended_threshold_tokens", **labels) == 256
        assert _sample("spx_host_bound_recommended_threshold_tokens", **labels) == 16384
        assert _sample("spx_host_bound_crossover_tokens", **labels) == pytest.approx(9434.2)
        assert _sample("spx_kernel_host_bound_speedup_ratio", namespace="ml", experiment="bounds", tokens="2048",
                       gpu="NVIDIA H200") == pytest.approx(255.1 / 307.9)
    finally:
        metrics.forget_experiment("ml", "bounds")
    assert _sample("spx_host_bound_recommended_threshold_tokens", **labels) is None


def test_promtool_finds_nothing_in_the_exposition() -> None:
    promtool = require_binary("promtool")
    out = subprocess.run([promtool, "check", "metrics"], input=metrics.exposition().decode(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out.stdout + out.stderr


def test_serve_binds_the_address_it_is_given() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server, thread = metrics.serve(port, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as rsp:
            assert b"spx_workqueue_depth" in rsp.read()
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
        thread.join(10)


def test_no_created_series() -> None:
    """prometheus_client's ``*_created`` series are switched off: nothing reads them."""
    from spx.controller import metrics

    metrics.RECONCILES.labels(handler="test", outcome="ok").inc()
    text = metrics.generate_latest(metrics.REGISTRY).decode()
    assert "spx_reconcile_total{" in text
    assert "_created" not in text


def test_series_of_long_decided_experiments_expire() -> None:
    """SPX_SERIES_RETENTION_SECONDS: a Succeeded experiment's value series go once it was decided longer
    ago than the retention; its phase series stays (the object still exists)."""
    import time as _time

    from spx.controller import metrics as m

    status = {"phase": "Succeeded", "verdict": "Pass", "environment": {"gpu": "NVIDIA H200", "device": "cuda"},
              "kernel": {"crossoverTokens": 900.0, "gemmBackend": "humming", "gatherSource": "measured",
                         "points": [{"tokens": 1024, "rowsPerRank": 128, "replicatedUs": 40.0, "splitUs": 30.0, "speedup": 1.33}]}}
    try:
        m.set_series_retention(3600)
        m.observe_experiment("ret", "fresh", status, phase_since=_time.time() - 60)
        m.observe_experiment("ret", "old", status, phase_since=_time.time() - 7200)
        text = m.generate_latest(m.REGISTRY).decode()
        assert 'spx_crossover_tokens{' in text and 'experiment="fresh"' in text
        assert not [line for line in text.splitlines()
                    if 'experiment="old"' in line and not line.startswith("spx_experiment_phase_since")]
        assert 'spx_experiment_phase_since_timestamp_seconds{experiment="old"' in text
    finally:
        m.set_series_retention(0)
        m.forget_experiment("ret", "fresh")
        m.forget_experiment("ret", "old")


def test_what_decided_is_exported() -> None:
    """Issue #36: decided_by on spx_verdict, each regime's verdict and crossover, Δg/Δh with intervals per
    point, and spx_recommended_threshold_tokens from the deciding measurement — the step, which recommends
    none here, so the GPU-bound 256 (which contradicts the Fail) is not exported as the recommendation."""
    key = {"namespace": "ml", "experiment": "decided"}
    labels = dict(zip(("namespace", "experiment", *metrics.COMPARABLE_LABELS),
                      ("ml", "decided", *metrics.comparable_values(STEP_DECIDED)), strict=True))
    try:
        metrics.observe_experiment("ml", "decided", STEP_DECIDED)
        assert _sample("spx_verdict", **key, gpu="NVIDIA H200", vllm="0.33.0", decided_by="step", verdict="Fail") == 1
        assert _sample("spx_verdict", **key, gpu="NVIDIA H200", vllm="0.33.0", decided_by="step", verdict="Pass") == 0
        assert _sample("spx_recommended_threshold_tokens", **labels) is None  # the step recommends none
        assert _sample("spx_crossover_tokens", **labels) == pytest.approx(234.0)  # the GPU-bound crossover stays
        assert _sample("spx_regime_verdict", **key, regime="gpu-bound", verdict="Pass") == 1
        assert _sample("spx_regime_verdict", **key, regime="host-bound", verdict="Fail") == 1
        assert _sample("spx_regime_verdict", **key, regime="host-bound", verdict="Pass") == 0
        assert _sample("spx_regime_crossover_tokens", **key, regime="host-bound") == pytest.approx(9434.2)
        assert _sample("spx_regime_recommended_threshold_tokens", **key, regime="gpu-bound") == 256
        assert _sample("spx_kernel_delta_seconds", **key, tokens="2048", delta="host", bound="estimate") == \
            pytest.approx(52.8e-6)
        assert _sample("spx_kernel_delta_seconds", **key, tokens="2048", delta="gpu", bound="low") == pytest.approx(-21e-6)
        # the kernel deciding: its own recommendation, and the verdict's label follows
        kernel_decided = {**STEP_DECIDED, "kernel": {**STEP_DECIDED["kernel"], "decidedBy": "kernel"}}
        metrics.observe_experiment("ml", "decided", kernel_decided)
        assert _sample("spx_recommended_threshold_tokens", **labels) == 256
        assert _sample("spx_verdict", **key, gpu="NVIDIA H200", vllm="0.33.0", decided_by="step", verdict="Fail") is None
        assert _sample("spx_verdict", **key, gpu="NVIDIA H200", vllm="0.33.0", decided_by="kernel", verdict="Fail") == 1
    finally:
        metrics.forget_experiment("ml", "decided")
    assert _sample("spx_regime_verdict", **key, regime="gpu-bound", verdict="Pass") is None


@pytest.mark.skipif(not step_curve_contract(), reason="this tree's StepStatus has no one-server curve yet (issue #34's "
                                                      "contract, branch contract): nothing to export")
def test_the_step_curve_is_exported() -> None:
    """Issue #36: the step curve per arm and length (per step and per layer, aligned and pad path, with its
    interval and outcome), the A/A, the expected effect over the batch mix, usable; once the step recommends
    a threshold, that is spx_recommended_threshold_tokens."""
    key = {"namespace": "ml", "experiment": "stepped"}
    labels = dict(zip(("namespace", "experiment", *metrics.COMPARABLE_LABELS),
                      ("ml", "stepped", *metrics.comparable_values(STEP_DECIDED)), strict=True))
    split = {**key, "arm": "split", "length": "2048", "path": "aligned"}
    try:
        metrics.observe_experiment("ml", "stepped", STEP_DECIDED)
        assert _sample("spx_step_effect_seconds", **split, bound="estimate") == pytest.approx(1.9e-3)
        assert _sample("spx_step_effect_per_layer_seconds", **split, bound="high") == pytest.approx(55e-6)
        assert _sample("spx_step_effect_per_layer_seconds", **key, arm="split", length="2047", path="pad",
                       bound="estimate") == pytest.approx(52.5e-6)
        assert _sample("spx_step_outcome", **split, outcome="loss") == 1
        assert _sample("spx_step_effect_seconds", **key, arm="aa", length="2048", path="aligned", bound="low") == \
            pytest.approx(-0.2e-3)
        assert _sample("spx_step_expected_effect_per_layer_seconds", **key, threshold="2048", arm="split",
                       bound="estimate") == pytest.approx(51.25e-6)
        assert _sample("spx_step_usable", **key) == 1
        with_threshold = {**STEP_DECIDED, "step": {**STEP_DECIDED["step"], "recommendedThresholdTokens": 8192}}
        metrics.observe_experiment("ml", "stepped", with_threshold)
        assert _sample("spx_recommended_threshold_tokens", **labels) == 8192
        metrics.observe_experiment("ml", "stepped", {**STEP_DECIDED, "step": None})
        assert _sample("spx_step_effect_seconds", **split, bound="estimate") is None  # stale step series removed
    finally:
        metrics.forget_experiment("ml", "stepped")
