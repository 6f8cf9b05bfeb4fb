"""Kueue as the queue, against the real control plane with Kueue's LocalQueue CRD installed (vendored:
``tests/data/crds/kueue.x-k8s.io_localqueues.yaml``) and the real operator limited to ONE concurrent run.

No Kueue controller runs here (it cannot be installed): its admission decision is simulated by what
Kueue itself does on admission, unsuspending the Job (``spec.suspend: false``). Everything else is
real: the operator's discovery of Kueue's API, its read of the LocalQueue, the Job controller.

The tests run in file order: first without Kueue's CRDs, then with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from spx_testing.cluster import Cluster, condition
from spx_testing.controlplane import ControlPlane, install_crd
from spx_testing.nodeagent import Fault
from spx_testing.specs import CPU_SPEC

pytestmark = pytest.mark.timeout(600)
NS = "kueue"
LOCALQUEUE_CRD = Path(__file__).parents[1] / "data" / "crds" / "kueue.x-k8s.io_localqueues.yaml"
LQ_API = "kueue.x-k8s.io/v1beta1"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(control_plane, NS, tmp_path_factory.mktemp("operator-kueue"),
                default_fault=Fault(replay=True, replay_seconds=0.2))
    c.start_operator(env={"SPX_MAX_CONCURRENT_EXPERIMENTS": "1"})
    c.wait_operator_ready()
    yield c
    c.close()


def completed_reason(obj: dict[str, Any]) -> str:
    return str((condition(obj, "Completed") or {}).get("reason"))


def test_without_kueue_a_queued_experiment_is_refused_at_once(cluster: Cluster) -> None:
    if cluster.api.get("apiextensions.k8s.io/v1", "customresourcedefinitions", None, "localqueues.kueue.x-k8s.io"):
        pytest.skip("Kueue's LocalQueue CRD is already installed on this control plane")
    cluster.apply("no-kueue", {**CPU_SPEC, "scheduling": {"queueName": "gpu-queue"}})
    obj = cluster.wait_decided("no-kueue", timeout=60)
    assert obj["status"]["phase"] == "Failed" and completed_reason(obj) == "KueueNotInstalled", obj["status"]
    assert "does not serve Kueue's API" in obj["status"]["message"]
    assert cluster.get("batch/v1", "jobs", "no-kueue-g1") is None  # no Job ever existed


@pytest.fixture(scope="module")
def kueue(cluster: Cluster) -> Cluster:
    crd = yaml.safe_load(LOCALQUEUE_CRD.read_text())
    install_crd(cluster.api, crd)
    cluster.api.create(LQ_API, "localqueues", NS, {"apiVersion": LQ_API, "kind": "LocalQueue",
                                                   "metadata": {"name": "gpu-queue", "namespace": NS},
                                                   "spec": {"clusterQueue": "h200"}})
    return cluster


def test_a_missing_local_queue_is_refused_before_a_job_exists(kueue: Cluster) -> None:
    kueue.apply("no-queue", {**CPU_SPEC, "scheduling": {"queueName": "typo-queue"}})
    obj = kueue.wait_decided("no-queue", timeout=60)
    assert obj["status"]["phase"] == "Failed" and completed_reason(obj) == "LocalQueueNotFound", obj["status"]
    assert "LocalQueue 'typo-queue' does not exist in namespace 'kueue'" in obj["status"]["message"]
    assert kueue.get("batch/v1", "jobs", "no-queue-g1") is None


def test_a_suspended_job_holds_no_slot_and_runs_once_admitted(kueue: Cluster) -> None:
    """Limit 1: the Kueue experiment's Job waits suspended while a plain experiment takes the slot and
    finishes; then "Kueue" admits (the test unsuspends the Job, as Kueue would) and it runs."""
    kueue.apply("kueued", {**CPU_SPEC, "scheduling": {"queueName": "gpu-queue",
                                                     "workloadPriorityClassName": "bench-high"}})
    held = kueue.wait_for(lambda: (o := kueue.exp("kueued")) and (condition(o, "Scheduled") or {}).get("reason") == "Suspended" and o,
                          120, "Scheduled=False/Suspended")
    assert held["status"]["phase"] == "Queued" and "gpu-queue" in held["status"]["message"]
    job = kueue.get("batch/v1", "jobs", "kueued-g1")
    assert job is not None and job["spec"]["suspend"] is True
    labels = job["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "gpu-queue" and labels["kueue.x-k8s.io/priority-class"] == "bench-high"

    kueue.apply("plain", CPU_SPEC)  # the operator's only slot is free: the suspended Job does not hold it
    plain = kueue.wait_decided("plain", timeout=180)
    assert plain["status"]["phase"] == "Succeeded", plain["status"].get("message")
    assert (kueue.exp("kueued") or {})["status"]["phase"] == "Queued"  # still waiting for "Kueue"

    kueue.patch("batch/v1", "jobs", "kueued-g1", {"spec": {"suspend": False}})  # Kueue's admission, simulated
    assert kueue.wait_decided("kueued", timeout=180)["status"]["phase"] == "Succeeded"


def test_the_operators_queue_steps_aside_for_kueue(kueue: Cluster) -> None:
    """Limit 1, its slot held by a running plain experiment: a Kueue experiment neither waits for the
    operator's slot (its Job is created at once, suspended for Kueue) nor needs one once "Kueue" admits
    it — it runs to the end while the plain one still holds the slot. Two queues never stack."""
    kueue.agent.faults["blocker"] = Fault(replay=True, replay_seconds=60)  # type: ignore[union-attr]
    kueue.apply("blocker", CPU_SPEC)
    kueue.wait_for(lambda: ((kueue.exp("blocker") or {}).get("status") or {}).get("phase") == "Running", 120,
                   "blocker Running (holding the only slot)")
    kueue.apply("aside", {**CPU_SPEC, "scheduling": {"queueName": "gpu-queue"}})
    job = kueue.wait_for(lambda: kueue.get("batch/v1", "jobs", "aside-g1"), 60, "the Kueue experiment's Job")
    assert job["spec"]["suspend"] is True
    kueue.patch("batch/v1", "jobs", "aside-g1", {"spec": {"suspend": False}})  # Kueue's admission, simulated
    done = kueue.wait_decided("aside", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert ((kueue.exp("blocker") or {}).get("status") or {}).get("phase") == "Running"  # still holds its slot
    assert kueue.wait_decided("blocker", timeout=180)["status"]["phase"] == "Succeeded"
