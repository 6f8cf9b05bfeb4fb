"""Status as real clients read it, on the real API server: ``kubectl wait``, the gating recipe, kstatus.

- ``kubectl wait --for=condition=Decided`` and ``--for=jsonpath=...`` (the real kubectl) on an
  experiment the real operator decided;
- ``examples/gating/wait-for-verdict.sh`` for Pass, Fail, Inconclusive and InvalidSpec, and its exit
  code and message for a usage error, a missing experiment and an unreachable server. Inconclusive
  is the real operator's verdict on a CPU run; Pass, Fail and InvalidSpec statuses are written
  through the status subresource (as the operator writes them), since a CPU run cannot honestly
  produce a speed verdict and the CRD's CEL rules now refuse every spec spx.api refuses;
- the conditions kstatus-based tools (Flux, Argo CD, Helm's wait) read: ``Ready``, ``Reconciling``,
  ``Stalled`` with ``observedGeneration``, and ``conditions`` as a map-list keyed by ``type``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spx.api.exit_codes import EXIT_UNREACHABLE, EXIT_USAGE
from spx.api.status import KernelStatus
from spx_testing.cluster import EXP_API, EXP_PLURAL, Cluster, condition
from spx_testing.controlplane import ControlPlane, free_port
from spx_testing.nodeagent import Fault
from spx_testing.specs import CPU_SPEC

pytestmark = pytest.mark.timeout(600)
NS = "status-clients"
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "gating" / "wait-for-verdict.sh"
@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(control_plane, NS, tmp_path_factory.mktemp("status-clients"),
                default_fault=Fault(replay=True, replay_seconds=3))
    c.start_operator(env={"SPX_BENCH_IMAGE": "spx-bench:test", "SPX_IMAGE_PULL_TIMEOUT_SECONDS": "5"})
    c.wait_operator_ready()
    yield c
    c.close()


def kubectl(cluster: Cluster, *args: str, kubeconfig: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([cluster.cp.kubectl(), "--kubeconfig", str(kubeconfig or cluster.kubeconfig), "-n", NS, *args],
                          capture_output=True, text=True, timeout=timeout)


def recipe(cluster: Cluster, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECTL": cluster.cp.kubectl(), "KUBECONFIG": str(kubeconfig or cluster.kubeconfig)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture(scope="module")
def decided(cluster: Cluster) -> dict[str, Any]:
    """A CPU run the real operator takes to its verdict (Inconclusive: CPU timings)."""
    cluster.apply("cpu-run", CPU_SPEC)
    proc = kubectl(cluster, "wait", "--for=condition=Decided", "--timeout=240s", f"{EXP_PLURAL}.bench.spx.dev/cpu-run",
                   timeout=300)
    assert proc.returncode == 0, proc.stderr + cluster.context()
    obj = cluster.exp("cpu-run")
    assert obj is not None
    return obj


def test_kubectl_wait_for_decided_and_jsonpath(cluster: Cluster, decided: dict[str, Any]) -> None:
    assert decided["status"]["verdict"] == "Inconclusive"
    proc = kubectl(cluster, "wait", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=30s",
                   f"{EXP_PLURAL}.bench.spx.dev/cpu-run")
    assert proc.returncode == 0, proc.stderr
    got = kubectl(cluster, "get", f"{EXP_PLURAL}.bench.spx.dev/cpu-run", "-o",
                  "jsonpath={.status.conditions[?(@.type==\"Decided\")].reason}")
    assert got.returncode == 0 and got.stdout == "Inconclusive"
    columns = kubectl(cluster, "get", "spx", "cpu-run")  # short name and printer columns
    assert columns.returncode == 0 and "Inconclusive" in columns.stdout and "Succeeded" in columns.stdout


def test_recipe_inconclusive_from_the_operator(cluster: Cluster, decided: dict[str, Any]) -> None:
    proc = recipe(cluster, "cpu-run", NS, "60s")
    assert proc.returncode == 2 and proc.stdout.startswith(f"Inconclusive: {NS}/cpu-run"), proc.stdout + proc.stderr


def write_status(cluster: Cluster, name: str, verdict: str | None, reason: str) -> None:
    """Create an experiment and write a decided status through the status subresource."""
    cluster.apply(name, CPU_SPEC)
    cond = {"type": "Decided", "status": "True", "reason": reason, "message": f"test: {reason}",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}
    status: dict[str, Any] = {"phase": "Succeeded" if verdict else "Failed", "observedGeneration": 1,
                              "conditions": [cond], "verdictReasons": [f"because {reason}"]}
    if verdict:
        status["verdict"] = verdict
    cluster.patch(EXP_API, EXP_PLURAL, name, {"status": status}, sub="status")


@pytest.fixture(scope="module")
def written(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A namespace without an operator: the statuses written there stay as written."""
    c = Cluster(control_plane, f"{NS}-written", tmp_path_factory.mktemp("status-written"), agent=False)
    yield c
    c.close()


@pytest.mark.parametrize(("verdict", "reason", "code", "out"), [
    ("Pass", "Pass", 0, "Pass: "), ("Fail", "Fail", 1, "Fail: "), ("Inconclusive", "Inconclusive", 2, "Inconclusive: "),
    (None, "InvalidSpec", 2, ""),
])
def test_recipe_exit_codes(written: Cluster, verdict: str | None, reason: str, code: int, out: str) -> None:
    name = f"written-{reason.lower()}"
    write_status(written, name, verdict, reason)
    env = {**os.environ, "KUBECTL": written.cp.kubectl(), "KUBECONFIG": str(written.kubeconfig)}
    proc = subprocess.run(["bash", str(SCRIPT), name, written.ns, "30s"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert proc.stdout.startswith(out + f"{written.ns}/{name}") if out else f"No verdict ({reason})" in proc.stderr


def test_recipe_usage_error_is_not_the_fail_code(cluster: Cluster) -> None:
    proc = recipe(cluster)
    assert proc.returncode == EXIT_USAGE and "usage:" in proc.stderr


def test_recipe_missing_experiment_is_a_usage_error(cluster: Cluster) -> None:
    proc = recipe(cluster, "no-such-experiment", NS, "10s")
    assert proc.returncode == EXIT_USAGE and "No such experiment" in proc.stderr and "not found" in proc.stderr


def test_recipe_unreachable_server_is_not_the_fail_code(cluster: Cluster, tmp_path: Path) -> None:
    dead = cluster.cp.write_kubeconfig(tmp_path / "dead", server=f"https://127.0.0.1:{free_port()}", namespace=NS)
    proc = recipe(cluster, "cpu-run", NS, "10s", kubeconfig=dead)
    assert proc.returncode == EXIT_UNREACHABLE, proc.stdout + proc.stderr
    assert "Unreachable: cannot read" in proc.stderr and "refused" in proc.stderr


def test_conditions_are_a_map_list_keyed_by_type(cluster: Cluster, decided: dict[str, Any]) -> None:
    """Server-side apply of one condition by another manager merges by ``type`` (a map-list)."""
    patch = {"apiVersion": EXP_API, "kind": "ShardedProjectionExperiment", "metadata": {"name": "cpu-run", "namespace": NS},
             "status": {"conditions": [{"type": "ExternalCheck", "status": "True", "reason": "Checked", "message": "",
                                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    cluster.api.request("PATCH", f"/apis/{EXP_API}/namespaces/{NS}/{EXP_PLURAL}/cpu-run/status",
                        json.dumps(patch).encode(), "application/apply-patch+yaml",
                        params={"fieldManager": "another-controller"})
    obj = cluster.exp("cpu-run")
    types = [c["type"] for c in obj["status"]["conditions"]]  # type: ignore[index]
    assert "ExternalCheck" in types and "Decided" in types and len(types) == len(set(types))


def test_kstatus_conditions_of_a_decided_run(decided: dict[str, Any]) -> None:
    gen = decided["metadata"]["generation"]
    ready, reconciling, stalled = (condition(decided, t) for t in ("Ready", "Reconciling", "Stalled"))
    assert ready is not None and ready["status"] == "True" and ready["observedGeneration"] == gen
    assert reconciling is None or reconciling["status"] == "False"
    assert stalled is None or stalled["status"] == "False"


def test_kstatus_conditions_of_a_running_and_a_failed_run(cluster: Cluster) -> None:
    assert cluster.agent is not None
    cluster.agent.faults["kstatus-run"] = Fault(replay=True, replay_seconds=20)
    cluster.apply("kstatus-run", CPU_SPEC)
    running = cluster.wait_phase("kstatus-run", {"Running"}, timeout=120)
    assert (condition(running, "Reconciling") or {}).get("status") == "True"
    assert (condition(running, "Ready") or {}).get("status") == "False"
    cluster.agent.faults["kstatus-fail"] = Fault(image_pull="InvalidImageName")
    cluster.apply("kstatus-fail", CPU_SPEC)
    failed = cluster.wait_decided("kstatus-fail", timeout=120)
    stalled = condition(failed, "Stalled")
    assert stalled is not None and stalled["status"] == "True"
    assert stalled["observedGeneration"] == failed["metadata"]["generation"]


def test_printer_columns_show_whole_tokens_and_the_reason(written: Cluster) -> None:
    """The Crossover column prints the crossover rounded to whole tokens (28.92182662508109 → 29, where an
    "integer" column on the float would truncate to 28): the kernel status is dumped by the model the
    operator writes it with (``KernelStatus.to_wire``, which adds ``crossoverTokensRounded``); the Reason
    column shows the Decided condition's reason."""
    write_status(written, "columns", "Pass", "Pass")
    kernel = KernelStatus(crossover_tokens=28.92182662508109, recommended_threshold_tokens=32).to_wire()
    assert kernel["crossoverTokensRounded"] == 29
    written.patch(EXP_API, EXP_PLURAL, "columns", {"status": {"kernel": kernel}}, sub="status")
    obj = written.get(EXP_API, EXP_PLURAL, "columns")
    assert obj is not None
    stored = obj["status"]["kernel"]
    assert stored["crossoverTokens"] == 28.92182662508109 and stored["crossoverTokensRounded"] == 29  # not pruned
    env = {**os.environ, "KUBECONFIG": str(written.kubeconfig)}
    out = subprocess.run([written.cp.kubectl(), "get", "spx", "columns", "-n", written.ns], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()[:2]
    # columns by position (the GPU cell is empty here, so splitting on blanks would shift them)
    names = header.split()
    starts = [header.index(n) for n in names] + [len(row) + 1]
    cells = {n: row[a:b].strip() for n, a, b in zip(names, starts, starts[1:], strict=False)}
    assert cells["CROSSOVER"] == "29" and cells["THRESHOLD"] == "32", out.stdout
    assert cells["REASON"] == "Pass" and "28.92" not in out.stdout, out.stdout
