"""The "what decided" queries of the dashboard in a real Prometheus, on a step-decided experiment (issue #36).

test_obs_prometheus.py runs every query against the real operator after a real CPU experiment; that
experiment has no step A/B (the one-server step runner is being rebuilt, issue #34, and needs a vLLM
server with spx's worker extension), so its step panels are checked there only to be empty. Here the
operator's own metrics code (:func:`spx.controller.metrics.observe_experiment` on the status the issue
describes: regimes disagree, the step decided Fail with +47.5 µs per layer) is served by the operator's
real endpoint (:func:`spx.controller.metrics.serve`) and scraped by a real Prometheus; the stand-in is
only the status, written by hand instead of by a reconcile. Each panel's query must return the status's
figures, and no panel may show the GPU-bound regime's 256 as the recommendation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from spx.controller import metrics
from spx.tools.dashboard import panel_queries
from spx_testing.cluster import free_port
from spx_testing.obslib import DASHBOARD, STEP_DECIDED, require_binary, step_curve_contract
from spx_testing.prometheus import Prometheus

pytestmark = pytest.mark.timeout(300)
NS, NAME = "obs-step", "step-decided"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    require_binary("prometheus")
    port = free_port()
    server, thread = metrics.serve(port, "127.0.0.1")
    metrics.observe_experiment(NS, NAME, STEP_DECIDED, phase_since=time.time())
    p = None
    try:
        p = Prometheus(tmp_path_factory.mktemp("obs-step"), port)
        deadline = time.monotonic() + 60
        while not p.query(f'spx_regime_verdict{{experiment="{NAME}"}}'):
            assert time.monotonic() < deadline, "Prometheus did not scrape the experiment's series in 60 s"
            time.sleep(0.5)
        yield p
    finally:
        if p is not None:
            p.close()
        metrics.forget_experiment(NS, NAME)
        server.shutdown()
        thread.join(10)


def _queries(title: str) -> list[str]:
    found = [q for t, q in panel_queries(json.loads(DASHBOARD.read_text())) if t == title]
    assert found, f"no panel {title!r}"
    return [q.replace("$cluster", ".*").replace("$namespace", NS).replace("$experiment", NAME) for q in found]


def _labels(result: list[dict[str, Any]], *names: str) -> dict[tuple[str, ...], float]:
    return {tuple(s["metric"][n] for n in names): float(s["value"][1]) for s in result}


def test_verdict_decided_by_and_recommendation(prom: Prometheus) -> None:
    (verdict,) = _queries("Verdict")
    assert [s["metric"]["verdict"] for s in prom.query(verdict)] == ["Fail"]
    (by,) = _queries("Decided by")
    assert [s["metric"]["decided_by"] for s in prom.query(by)] == ["step"]
    # the step decided and recommends no threshold: the GPU-bound 256 is not shown as the recommendation
    (rec,) = _queries("Recommended threshold (from what decided)")
    assert prom.query(rec) == []


def test_each_regime_its_own_verdict_crossover_and_threshold(prom: Prometheus) -> None:
    verdicts, crossovers, thresholds = _queries("Kernel regimes (each its own verdict)")
    assert _labels(prom.query(verdicts), "regime", "verdict") == {("gpu-bound", "Pass"): 1, ("host-bound", "Fail"): 1}
    assert _labels(prom.query(crossovers), "regime") == pytest.approx({("gpu-bound",): 234.0, ("host-bound",): 9434.2})
    assert _labels(prom.query(thresholds), "regime") == {("gpu-bound",): 256, ("host-bound",): 16384}


NO_CURVE = pytest.mark.skipif(not step_curve_contract(), reason="this tree's StepStatus has no one-server curve yet "
                                                                 "(issue #34's contract, branch contract)")


@NO_CURVE
def test_step_curve_with_intervals_on_both_paths(prom: Prometheus) -> None:
    (curve,) = _queries("Step effect per layer vs tokens (step A/B)")
    got = _labels(prom.query(curve), "series", "length")
    assert got == pytest.approx({
        ("split aligned estimate", "2048"): 47.5e-6, ("split aligned low", "2048"): 40e-6,
        ("split aligned high", "2048"): 55e-6, ("split pad estimate", "2047"): 52.5e-6,
        ("split pad low", "2047"): 42.5e-6, ("split pad high", "2047"): 62.5e-6,
    })  # the A/A (arm aa) is calibration, not on the curve


def test_deltas(prom: Prometheus) -> None:
    (deltas,) = _queries("Δg and Δh per layer vs tokens (kernel)")
    got = _labels(prom.query(deltas), "series", "tokens")
    assert got == pytest.approx({("gpu estimate", "2048"): -19.8e-6, ("gpu low", "2048"): -21e-6,
                                 ("gpu high", "2048"): -18.5e-6, ("host estimate", "2048"): 52.8e-6,
                                 ("host low", "2048"): 49e-6, ("host high", "2048"): 56.1e-6})


@NO_CURVE
def test_expected_effect(prom: Prometheus) -> None:
    (expected,) = _queries("Expected step effect over the batch mix")
    got = _labels(prom.query(expected), "row", "bound")
    assert got == pytest.approx({("split from 2048", "estimate"): 51.25e-6, ("split from 2048", "low"): 42.5e-6,
                                 ("split from 2048", "high"): 60e-6})


def test_the_gate_alert_says_what_decided(prom: Prometheus) -> None:
    """SpxGateFailed's expression carries decided_by from spx_verdict (the rules file, evaluated as is)."""
    import yaml

    from spx_testing.obslib import RULES

    expr = next(r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                if r.get("alert") == "SpxGateFailed")
    deadline = time.monotonic() + 30
    while not (fired := prom.query(expr)) and time.monotonic() < deadline:
        time.sleep(0.5)  # spx:experiment_decided_age_seconds needs one rule evaluation after the first scrape
    assert [(s["metric"]["experiment"], s["metric"]["decided_by"]) for s in fired] == [(NAME, "step")]
