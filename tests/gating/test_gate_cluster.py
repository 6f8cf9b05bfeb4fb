"""The cluster side of the gating recipes, against the real API server of the session's control plane
(``control_plane`` in tests/conftest.py: etcd + kube-apiserver + kube-controller-manager, the CRD
from ``crds/`` installed with server-side apply):

- `spx gate NAME` reads the experiment through a kubeconfig with the real `kubernetes` client;
- examples/gating/wait-for-verdict.sh runs with the real `kubectl` (`kubectl wait
  --for=condition=Decided`, then `.status.verdict`), the control plane's own.

Statuses are written through the status subresource as the operator writes them (the real server
validates them against the CRD's schema); the operator itself is exercised end to end in
tests/observability/test_obs_prometheus.py and tests/integration/test_status_clients.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spx.api import Condition, ExperimentStatus, dump_model
from spx_testing.cluster import EXP_API, EXP_PLURAL, experiment
from spx_testing.controlplane import ControlPlane, free_port
from spx_testing.kubeapi import Api
from spx_testing.specs import CPU_SPEC

ROOT = Path(__file__).resolve().parents[2]
NS = "ml-bench"
SCRIPT = ROOT / "examples" / "gating" / "wait-for-verdict.sh"


@pytest.fixture(scope="module")
def cluster(kube: Api) -> Iterator[Api]:
    kube.create("v1", "namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    yield kube
    kube.delete("v1", "namespaces", None, NS)


@pytest.fixture(scope="module")
def kubeconfig(control_plane: ControlPlane, cluster: Api, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return control_plane.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config", namespace=NS)


def _status(verdict: str | None, reason: str, decided: bool = True, generation: int = 1) -> dict[str, Any]:
    cond = Condition(type="Decided", status="True" if decided else "False", reason=reason, message=f"test: {reason}",
                     last_transition_time="2026-01-01T00:00:00Z", observed_generation=generation)  # fmt: skip
    phase = "Succeeded" if verdict else ("Failed" if decided else "Running")
    return dump_model(ExperimentStatus(phase=phase, observed_generation=generation, conditions=[cond], verdict=verdict,
                                       verdict_reasons=[f"because {reason}"]))  # fmt: skip


def _experiment(cluster: Api, name: str, status: dict[str, Any] | None) -> dict[str, Any]:
    obj = cluster.create(EXP_API, EXP_PLURAL, NS, experiment(name, CPU_SPEC, NS))
    if status is not None:
        obj = cluster.patch(EXP_API, EXP_PLURAL, NS, name, {"status": status}, sub="status")
    return obj


def _gate(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    spx = Path(sys.executable).parent / "spx"
    return subprocess.run([str(spx), "gate", *args, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


CASES = [("gate-pass", "Pass", "Pass", 0), ("gate-fail", "Fail", "Fail", 1),
         ("gate-unsure", "Inconclusive", "Inconclusive", 2), ("gate-broken", None, "BenchmarkFailed", 2)]  # fmt: skip


@pytest.mark.parametrize(("name", "verdict", "reason", "code"), CASES, ids=[c[0] for c in CASES])
def test_spx_gate_reads_the_cluster(
    cluster: Api, kubeconfig: Path, name: str, verdict: str | None, reason: str, code: int
) -> None:
    _experiment(cluster, name, _status(verdict, reason))
    proc = _gate(kubeconfig, name)  # namespace from the kubeconfig context
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert f"{NS}/{name}" in proc.stdout
    explicit = _gate(kubeconfig, name, "-n", NS, "--json")
    assert explicit.returncode == code


def test_spx_gate_on_an_older_generations_status_is_undecided(cluster: Api, kubeconfig: Path) -> None:
    _experiment(cluster, "gate-stale", _status("Pass", "Pass", generation=1))
    assert _gate(kubeconfig, "gate-stale").returncode == 0
    # a new spec: generation 2, the status still describes generation 1
    bumped = cluster.patch(EXP_API, EXP_PLURAL, NS, "gate-stale", {"spec": {"timeoutSeconds": 7200}})
    assert bumped["metadata"]["generation"] == 2
    proc = _gate(kubeconfig, "gate-stale")
    assert proc.returncode == 2 and "generation 1" in proc.stdout, proc.stdout


def test_spx_gate_waits_for_the_decision(cluster: Api, kubeconfig: Path) -> None:
    _experiment(cluster, "gate-later", _status(None, "Running", decided=False))

    def decide_soon() -> None:
        time.sleep(1.5)
        cluster.patch(EXP_API, EXP_PLURAL, NS, "gate-later", {"status": _status("Pass", "Pass")}, sub="status")

    threading.Thread(target=decide_soon, daemon=True).start()
    proc = _gate(kubeconfig, "gate-later", "--wait", "30", "--interval", "0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_spx_gate_missing_experiment_or_cluster(
    control_plane: ControlPlane, cluster: Api, kubeconfig: Path, tmp_path: Path
) -> None:
    proc = _gate(kubeconfig, "no-such-experiment")
    assert proc.returncode == 3 and "not found" in proc.stderr  # a typo is a usage error, not Inconclusive
    dead = tmp_path / "dead"
    dead.write_text(kubeconfig.read_text().replace(control_plane.url, f"https://127.0.0.1:{free_port()}"))
    assert _gate(dead, "gate-pass").returncode == 4  # unreachable


# --------------------------------------------------------------------------- the kubectl script


def _script(kubeconfig: Path, kubectl: str, name: str, timeout: str = "20s") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": f"{Path(kubectl).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(SCRIPT), name, NS, timeout], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture(scope="module")
def kubectl(control_plane: ControlPlane) -> str:
    """The control plane's kubectl (KUBEBUILDER_ASSETS), put first on the script's PATH."""
    return control_plane.kubectl()


@pytest.mark.parametrize(("name", "verdict", "reason", "code"), CASES, ids=[c[0] for c in CASES])
def test_wait_script_with_real_kubectl(cluster: Api, kubeconfig: Path, kubectl: str, name: str, verdict: str | None,
                                       reason: str, code: int) -> None:  # fmt: skip
    if cluster.get(EXP_API, EXP_PLURAL, NS, name) is None:
        _experiment(cluster, name, _status(verdict, reason))
    proc = _script(kubeconfig, kubectl, name)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if verdict:
        assert proc.stdout.startswith(f"{verdict}: {NS}/{name}"), proc.stdout
    else:
        assert f"No verdict ({reason})" in proc.stderr


def test_wait_script_times_out_as_undecided(cluster: Api, kubeconfig: Path, kubectl: str) -> None:
    _experiment(cluster, "script-running", _status(None, "Running", decided=False))
    started = time.monotonic()
    proc = _script(kubeconfig, kubectl, "script-running", timeout="3s")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not decided within 3s" in proc.stderr
    assert time.monotonic() - started < 60


def test_wait_script_missing_experiment_is_usage_unreachable_cluster_is_4(
    control_plane: ControlPlane, cluster: Api, kubeconfig: Path, kubectl: str, tmp_path: Path
) -> None:
    proc = _script(kubeconfig, kubectl, "no-such-experiment")
    assert proc.returncode == 3 and "No such experiment" in proc.stderr, proc.stdout + proc.stderr
    dead = tmp_path / "dead"
    dead.write_text(kubeconfig.read_text().replace(control_plane.url, f"https://127.0.0.1:{free_port()}"))
    proc = _script(dead, kubectl, "gate-pass")
    assert proc.returncode == 4 and proc.stderr.startswith("Unreachable"), proc.stdout + proc.stderr
