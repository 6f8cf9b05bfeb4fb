"""The cluster side of the gating recipes, against the emulated API server of the operator tests
(tests/integration/emulator.py: kmock with uid/generation/status-subresource semantics):

- `spx gate NAME` reads the experiment through a kubeconfig with the real `kubernetes` client;
- examples/gating/wait-for-verdict.sh runs with the real `kubectl` (`kubectl wait
  --for=condition=Decided`, then `.status.verdict`).

Statuses are written through the status subresource as the operator writes them; the operator itself
is exercised end to end in tests/observability/test_obs_prometheus.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

emulator = pytest.importorskip("emulator", reason="tests/integration/emulator.py (kmock) is not available")

from spx.api import Condition, ExperimentStatus, dump_model  # noqa: E402

NS = "ml-bench"
SCRIPT = ROOT / "examples" / "gating" / "wait-for-verdict.sh"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    c = emulator.Cluster(tmp_path_factory.mktemp("gate-cluster"))
    crd = yaml.safe_load((ROOT / "charts" / "spx-operator" / "crds" / "shardedprojectionexperiments.yaml").read_text())
    c.call(c.emulator.install_crd, crd)
    c.call(c.emulator.put_object, "", "v1", "namespaces", None,
           {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})  # fmt: skip
    yield c
    c.close()


@pytest.fixture(scope="module")
def kubeconfig(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emu", "preferences": {},
        "clusters": [{"name": "emu", "cluster": {"server": cluster.url}}],
        "users": [{"name": "tester", "user": {"token": "unused"}}],
        "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "tester", "namespace": NS}}],
    }))  # fmt: skip
    return path


def _status(verdict: str | None, reason: str, decided: bool = True, generation: int = 1) -> dict[str, Any]:
    cond = Condition(type="Decided", status="True" if decided else "False", reason=reason, message=f"test: {reason}",
                     last_transition_time="2026-01-01T00:00:00Z", observed_generation=generation)  # fmt: skip
    phase = "Succeeded" if verdict else ("Failed" if decided else "Running")
    return dump_model(ExperimentStatus(phase=phase, observed_generation=generation, conditions=[cond], verdict=verdict,
                                       verdict_reasons=[f"because {reason}"]))  # fmt: skip


def _experiment(cluster: Any, name: str, status: dict[str, Any] | None) -> dict[str, Any]:
    obj = cluster.create(emulator.EXP_API, emulator.EXP_PLURAL, NS, emulator.experiment(name, {}, NS))
    if status is not None:
        obj = cluster.patch(emulator.EXP_API, emulator.EXP_PLURAL, NS, name, {"status": status}, sub="status")
    return obj


def _gate(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    spx = Path(sys.executable).parent / "spx"
    return subprocess.run([str(spx), "gate", *args, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


CASES = [("gate-pass", "Pass", "Pass", 0), ("gate-fail", "Fail", "Fail", 1),
         ("gate-unsure", "Inconclusive", "Inconclusive", 2), ("gate-broken", None, "BenchmarkFailed", 2)]  # fmt: skip


@pytest.mark.parametrize(("name", "verdict", "reason", "code"), CASES, ids=[c[0] for c in CASES])
def test_spx_gate_reads_the_cluster(
    cluster: Any, kubeconfig: Path, name: str, verdict: str | None, reason: str, code: int
) -> None:
    _experiment(cluster, name, _status(verdict, reason))
    proc = _gate(kubeconfig, name)  # namespace from the kubeconfig context
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert f"{NS}/{name}" in proc.stdout
    explicit = _gate(kubeconfig, name, "-n", NS, "--json")
    assert explicit.returncode == code


def test_spx_gate_on_an_older_generations_status_is_undecided(cluster: Any, kubeconfig: Path) -> None:
    _experiment(cluster, "gate-stale", _status("Pass", "Pass", generation=1))
    assert _gate(kubeconfig, "gate-stale").returncode == 0
    # a new spec: generation 2, the status still describes generation 1
    bumped = cluster.patch(emulator.EXP_API, emulator.EXP_PLURAL, NS, "gate-stale", {"spec": {"timeoutSeconds": 7200}})
    assert bumped["metadata"]["generation"] == 2
    proc = _gate(kubeconfig, "gate-stale")
    assert proc.returncode == 2 and "generation 1" in proc.stdout, proc.stdout


def test_spx_gate_waits_for_the_decision(cluster: Any, kubeconfig: Path) -> None:
    _experiment(cluster, "gate-later", _status(None, "Running", decided=False))

    def decide_soon() -> None:
        time.sleep(1.5)
        cluster.patch(
            emulator.EXP_API, emulator.EXP_PLURAL, NS, "gate-later", {"status": _status("Pass", "Pass")}, sub="status"
        )

    threading.Thread(target=decide_soon, daemon=True).start()
    proc = _gate(kubeconfig, "gate-later", "--wait", "30", "--interval", "0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_spx_gate_missing_experiment_or_cluster(cluster: Any, kubeconfig: Path, tmp_path: Path) -> None:
    proc = _gate(kubeconfig, "no-such-experiment")
    assert proc.returncode == 3 and "not found" in proc.stderr  # a typo is a usage error, not Inconclusive
    dead = tmp_path / "dead"
    dead.write_text(kubeconfig.read_text().replace(cluster.url, f"http://127.0.0.1:{emulator.free_port()}"))
    assert _gate(dead, "gate-pass").returncode == 4  # unreachable


# --------------------------------------------------------------------------- the kubectl script


def _script(kubeconfig: Path, name: str, timeout: str = "20s") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(
        ["bash", str(SCRIPT), name, NS, timeout], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl is not installed")
    return path


@pytest.mark.parametrize(("name", "verdict", "reason", "code"), CASES, ids=[c[0] for c in CASES])
def test_wait_script_with_real_kubectl(cluster: Any, kubeconfig: Path, kubectl: str, name: str, verdict: str | None,
                                       reason: str, code: int) -> None:  # fmt: skip
    if cluster.get(emulator.EXP_API, emulator.EXP_PLURAL, NS, name) is None:
        _experiment(cluster, name, _status(verdict, reason))
    proc = _script(kubeconfig, name)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if verdict:
        assert proc.stdout.startswith(f"{verdict}: {NS}/{name}"), proc.stdout
    else:
        assert f"No verdict ({reason})" in proc.stderr


def test_wait_script_times_out_as_undecided(cluster: Any, kubeconfig: Path, kubectl: str) -> None:
    _experiment(cluster, "script-running", _status(None, "Running", decided=False))
    started = time.monotonic()
    proc = _script(kubeconfig, "script-running", timeout="3s")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not decided within 3s" in proc.stderr
    assert time.monotonic() - started < 60


def test_wait_script_missing_experiment_is_usage_unreachable_cluster_is_4(
    cluster: Any, kubeconfig: Path, kubectl: str, tmp_path: Path
) -> None:
    proc = _script(kubeconfig, "no-such-experiment")
    assert proc.returncode == 3 and "No such experiment" in proc.stderr, proc.stdout + proc.stderr
    dead = tmp_path / "dead"
    dead.write_text(kubeconfig.read_text().replace(cluster.url, f"http://127.0.0.1:{emulator.free_port()}"))
    proc = _script(dead, "gate-pass")
    assert proc.returncode == 4 and proc.stderr.startswith("Unreachable"), proc.stdout + proc.stderr
