"""Faults at the Job's deadline, with the operator's default settings, on the real control plane.

The real Job controller enforces ``activeDeadlineSeconds`` (60 s, the least ``spec.timeoutSeconds``
allows): it deletes the pods first, then sets ``FailureTarget``, then ``Failed``. What each run must
end with: the first cause (never scheduled, with the scheduler's message; a node lost; the bench too
slow), and every line the bench wrote up to its exit — its SIGTERM grace period included — kept,
although the pod object is gone when the operator decides. Only the bench image is set (the operator
runs with its defaults: ``SPX_SCHEDULE_TIMEOUT_SECONDS=900`` is longer than the deadline, so the
deadline decides).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from spx_testing.cluster import Cluster, condition
from spx_testing.controlplane import ControlPlane
from spx_testing.nodeagent import Fault
from spx_testing.specs import CPU_SPEC

pytestmark = pytest.mark.timeout(600)
NS = "reliability"
DEADLINE_SPEC = {**CPU_SPEC, "timeoutSeconds": 60}


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(control_plane, NS, tmp_path_factory.mktemp("operator-reliability"))
    c.start_operator(env={"SPX_BENCH_IMAGE": "spx-bench:test"})
    c.wait_operator_ready()
    # One real bench run of the spec, recorded by the node agent: the faulty runs below replay it (their
    # 60 s deadline must not depend on how fast the real bench is on a shared machine).
    assert c.agent is not None
    c.agent.faults["recording"] = Fault(replay=True, replay_seconds=0)
    c.apply("recording", CPU_SPEC)
    assert c.wait_decided("recording", timeout=300)["status"]["phase"] == "Succeeded"
    yield c
    c.close()


def decided(cluster: Cluster, name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(experiment, Decided, Completed) once decided (the 60 s deadline, then the grace period)."""
    obj = cluster.wait_decided(name, timeout=240)
    d, c = condition(obj, "Decided"), condition(obj, "Completed")
    assert d is not None and c is not None
    return obj, dict(d), dict(c)


def test_a_pod_never_scheduled_until_the_deadline_names_the_schedulers_message(cluster: Cluster) -> None:
    """Failure mode 1: the Job controller deletes the Unschedulable pod at the deadline before it sets
    ``Failed``; the decision still names the first cause and the scheduler's message."""
    assert cluster.agent is not None
    cluster.agent.faults["nofit"] = Fault(unschedulable=True)
    cluster.apply("nofit", DEADLINE_SPEC)
    obj, d, c = decided(cluster, "nofit")
    assert d["reason"] == "InfraFailed" and c["reason"] == "NeverScheduled", d
    assert "Insufficient nvidia.com/gpu" in d["message"] and "activeDeadlineSeconds=60" in d["message"]
    scheduled = condition(obj, "Scheduled")
    assert scheduled is not None and scheduled["status"] == "False"
    # the status never claimed a bound pod on the way
    assert not any((condition(o, "Scheduled") or {}).get("status") == "True" for o in cluster.history("nofit"))


def test_points_written_in_the_grace_period_survive_the_deadline(cluster: Cluster) -> None:
    """Failure modes 1, 2 and 5: a rank hangs after 2 of 3 points; at the deadline the Job controller
    deletes the pod; in its grace period the bench writes its 3rd point and, 1 s later, a partial summary,
    exits 143, and the pod object is deleted — before the operator decides. Everything is kept."""
    assert cluster.agent is not None
    cluster.agent.faults["hung"] = Fault(replay=True, hang_after_points=2, grace_output=True)
    cluster.apply("hung", DEADLINE_SPEC)
    obj, d, c = decided(cluster, "hung")
    st = obj["status"]
    assert d["reason"] == "InfraFailed" and c["reason"] == "DeadlineExceeded", d
    assert "activeDeadlineSeconds=60" in d["message"]
    assert [p["tokens"] for p in st["kernel"]["points"]] == CPU_SPEC["sweep"]["tokens"]
    cm = cluster.get("v1", "configmaps", st["resultConfigMap"])
    assert cm is not None
    points = [json.loads(line) for line in cm["data"]["pod.log"].splitlines() if line.startswith('{"kind":"point"')]
    assert [p["point"]["tokens"] for p in points] == CPU_SPEC["sweep"]["tokens"]  # the last one: 1 s before exit
    summary = json.loads(cm["data"]["summary.json"])
    assert summary["complete"] is False and "SIGTERM" in summary["error"]
    assert cluster.list("v1", "pods", "batch.kubernetes.io/job-name=hung-g1") == []  # the pod was gone
    history = [o["status"].get("phase") for o in cluster.history("hung") if o.get("status")]
    assert "Pending" not in history[history.index("Running"):], history  # never back to Pending


def test_a_lost_node_is_not_waited_on(cluster: Cluster) -> None:
    """Failure mode 3: the node is lost while the bench runs; at the deadline the pod stays Terminating
    for good (no kubelet) and the Job keeps ``FailureTarget``. The operator reads the node, decides
    NodeLost, and keeps the points it received before."""
    assert cluster.agent is not None
    cluster.agent.faults["lost"] = Fault(replay=True, hang_after_points=2, lose_node_after=5)
    cluster.apply("lost", DEADLINE_SPEC)
    obj, d, c = decided(cluster, "lost")
    assert d["reason"] == "InfraFailed" and c["reason"] == "NodeLost", d
    assert "was lost" in d["message"]
    assert [p["tokens"] for p in obj["status"]["kernel"]["points"]] == CPU_SPEC["sweep"]["tokens"][:2]
    job = cluster.get("batch/v1", "jobs", "lost-g1")
    assert job is not None and not any(x["type"] == "Failed" for x in job["status"].get("conditions") or [])


def _point_lines(text: str) -> list[int]:
    return [json.loads(line)["point"]["tokens"] for line in text.splitlines() if line.startswith('{"kind":"point"')]


def test_points_of_a_job_deleted_mid_run_are_kept(cluster: Cluster) -> None:
    """Someone deletes the run's Job while the bench runs (a rank hangs after 2 of 3 points): the garbage
    collector deletes the pod, which writes its 3rd point in its grace period. ``InfraFailed`` /
    ``JobDeleted``, and everything the pod wrote is kept — points in the status, the log in the result
    ConfigMap — with no crossover, threshold or verdict (the run was cut short)."""
    assert cluster.agent is not None
    cluster.agent.faults["cut"] = Fault(replay=True, hang_after_points=2, grace_output=True)
    cluster.apply("cut", CPU_SPEC)  # timeoutSeconds 3600: only the deletion ends it

    def two_points() -> bool:
        pods = cluster.list("v1", "pods", "batch.kubernetes.io/job-name=cut-g1")
        if len(pods) != 1 or pods[0]["status"].get("phase") != "Running":
            return False
        text = cluster.api.request("GET", f"/api/v1/namespaces/{cluster.ns}/pods/{pods[0]['metadata']['name']}/log",
                                   params={"container": "bench"})
        return _point_lines(str(text)) == CPU_SPEC["sweep"]["tokens"][:2]

    cluster.wait_for(two_points, 120, "the bench to print 2 points")
    cluster.delete("batch/v1", "jobs", "cut-g1")
    obj, d, c = decided(cluster, "cut")
    st = obj["status"]
    assert d["reason"] == "InfraFailed" and c["reason"] == "JobDeleted", d
    assert "deleted before it finished" in d["message"] and "point(s) measured before it were kept" in d["message"]
    tokens = [p["tokens"] for p in st["kernel"]["points"]]
    assert tokens[:2] == CPU_SPEC["sweep"]["tokens"][:2], tokens  # (the 3rd when its grace-period line came in time)
    assert st["kernel"].get("recommendedThresholdTokens") is None and st["kernel"].get("crossoverTokens") is None
    assert st.get("verdict") is None
    cm = cluster.get("v1", "configmaps", st["resultConfigMap"])
    assert cm is not None and _point_lines(cm["data"]["pod.log"])[:2] == CPU_SPEC["sweep"]["tokens"][:2]
    assert "deleted before it finished" in cm["data"]["problems.txt"]


def test_a_pod_deleted_mid_run_is_infra_failed_not_a_benchmark_crash(cluster: Cluster) -> None:
    """Someone deletes the bench pod (``kubectl delete pod``: no Eviction API, no ``DisruptionTarget``)
    while a rank hangs after 2 of 3 points: the bench writes its 3rd point and a partial summary in its
    grace period and exits 143 (SIGTERM); the real Job controller fails the Job by its pod failure policy.
    The bench did not crash: ``InfraFailed`` / ``PodDeleted``, the points kept, no verdict."""
    assert cluster.agent is not None
    cluster.agent.faults["podcut"] = Fault(replay=True, hang_after_points=2, grace_output=True)
    cluster.apply("podcut", CPU_SPEC)  # timeoutSeconds 3600: only the deletion ends it
    names: list[str] = []

    def two_points() -> bool:
        pods = cluster.list("v1", "pods", "batch.kubernetes.io/job-name=podcut-g1")
        if len(pods) != 1 or pods[0]["status"].get("phase") != "Running":
            return False
        names[:] = [pods[0]["metadata"]["name"]]
        text = cluster.api.request("GET", f"/api/v1/namespaces/{cluster.ns}/pods/{names[0]}/log",
                                   params={"container": "bench"})
        return _point_lines(str(text)) == CPU_SPEC["sweep"]["tokens"][:2]

    cluster.wait_for(two_points, 120, "the bench to print 2 points")
    cluster.delete("v1", "pods", names[0])
    obj, d, c = decided(cluster, "podcut")
    st = obj["status"]
    assert d["reason"] == "InfraFailed" and c["reason"] == "PodDeleted", d
    assert f"pod {names[0]} was deleted while the bench ran" in d["message"] and "SIGTERM" in d["message"]
    assert [p["tokens"] for p in st["kernel"]["points"]] == CPU_SPEC["sweep"]["tokens"]  # the 3rd: grace period
    assert st.get("verdict") is None  # a partial run: no verdict (its partial summary says SIGTERM)
    assert cluster.jobs_created("podcut-") == ["podcut-g1"]
