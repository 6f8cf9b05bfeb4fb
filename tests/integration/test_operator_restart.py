"""Runs that outlive the operator or change under it: restart mid-run, spec edit mid-run, delete mid-run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spx_testing.cluster import EXP_API, EXP_PLURAL, Cluster, condition
from spx_testing.controlplane import ControlPlane
from spx_testing.nodeagent import Fault

pytestmark = pytest.mark.timeout(600)
NS = "restart"

SPEC: dict[str, Any] = {
    "projection": {"hiddenSize": 1024, "outputSizes": [256, 128]},
    "parallelism": {"tensorParallelSize": 2},
    "sweep": {"tokens": [8, 128, 2048]},
    "kernel": {"device": "cpu", "timer": "host", "gather": "gloo", "samples": 5, "warmup": 1,
               "cudaGraphs": False, "l2Flush": False},
    "timeoutSeconds": 3600,
}


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(control_plane, NS, tmp_path_factory.mktemp("operator-restart"))
    c.start_operator()
    c.wait_operator_ready()
    yield c
    c.close()


def running(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.wait_phase(name, {"Running"}, timeout=120)


def duration_count(cluster: Cluster) -> float:
    """``spx_experiment_duration_seconds_count`` of the running operator process."""
    (sample,) = cluster.metric_samples("spx_experiment_duration_seconds_count")
    return sample[1]


def test_operator_restarted_mid_run(cluster: Cluster) -> None:
    """SIGKILL the operator while the bench runs: the new one adopts the Job, never duplicates it."""
    cluster.agent.faults["restart"] = Fault(replay=True, replay_seconds=6)  # type: ignore[union-attr]
    cluster.apply("restart", SPEC)
    running(cluster, "restart")
    cluster.stop_operator(kill=True)
    cluster.start_operator()
    cluster.wait_operator_ready()
    obj = cluster.wait_decided("restart", timeout=180)
    assert obj["status"]["phase"] == "Succeeded", obj["status"]["message"]
    assert cluster.jobs_created("restart-") == ["restart-g1"]
    assert len(cluster.list("v1", "pods", "batch.kubernetes.io/job-name=restart-g1")) == 1
    # The operator that saw the run end timed it, once (Job creation → terminal phase).
    assert duration_count(cluster) == 1
    # Restarting again after the end changes nothing: the status is level-based and final.
    before = obj["metadata"]["resourceVersion"]
    cluster.stop_operator()
    cluster.start_operator()
    cluster.wait_operator_ready()
    cluster.wait_for(lambda: any(lb.get("experiment") == "restart" for lb, _ in cluster.metric_samples("spx_verdict")),
                     20, "the restarted operator to re-export the verdict")
    assert cluster.exp("restart")["metadata"]["resourceVersion"] == before  # type: ignore[index]
    assert cluster.jobs_created("restart-") == ["restart-g1"]
    assert duration_count(cluster) == 0  # a replayed terminal status is not a new run to time


def test_spec_edited_mid_run_starts_a_new_run(cluster: Cluster) -> None:
    cluster.agent.faults["edited"] = Fault(replay=True, replay_seconds=4)  # type: ignore[union-attr]
    cluster.apply("edited", SPEC)
    first = running(cluster, "edited")
    assert first["status"]["jobName"] == "edited-g1"
    new_tokens = [16, 256, 4096]
    cluster.patch(EXP_API, EXP_PLURAL, "edited", {"spec": {"sweep": {"tokens": new_tokens}}})
    obj = cluster.wait_decided("edited", timeout=180)
    st = obj["status"]
    assert obj["metadata"]["generation"] == 2 and st["observedGeneration"] == 2
    assert st["phase"] == "Succeeded" and st["jobName"] == "edited-g2"
    points = st["kernel"]["points"]
    assert [p["tokens"] for p in points if not p.get("addedBecause")] == new_tokens  # the edited sweep ran
    # … with the off-alignment count the gate threshold adds (sweep.offAlignment: T + 1 = 2049; 2T + 1 is past 4096)
    assert [p["tokens"] for p in points if p.get("addedBecause")] == [2049]
    assert cluster.jobs_created("edited-") == ["edited-g1", "edited-g2"]
    assert cluster.get("batch/v1", "jobs", "edited-g1") is None  # superseded run stopped
    assert cluster.get("v1", "configmaps", "edited-g1-result") is None  # it never finished
    assert condition(obj, "Decided")["observedGeneration"] == 2  # type: ignore[index]
    assert "JobDeleted" in {e["reason"] for e in cluster.events("edited")}


def test_status_edits_do_not_start_a_new_run(cluster: Cluster) -> None:
    """Only spec changes bump the generation; labels and status do not restart anything."""
    cluster.agent.faults["labelled"] = Fault(replay=True, replay_seconds=0.5)  # type: ignore[union-attr]
    cluster.apply("labelled", SPEC)
    cluster.wait_decided("labelled", timeout=120)
    cluster.patch(EXP_API, EXP_PLURAL, "labelled", {"metadata": {"labels": {"team": "perf"}}})
    obj = cluster.exp("labelled")
    assert obj is not None and obj["metadata"]["generation"] == 1
    assert cluster.jobs_created("labelled-") == ["labelled-g1"]


@pytest.mark.parametrize("propagation", ["Background", "Foreground"])
def test_experiment_deleted_mid_run(cluster: Cluster, propagation: str) -> None:
    """The real garbage collector removes the Job, its pod and anything else the experiment owns; the
    operator writes nothing for it afterwards. Foreground: the experiment itself stays (finalizer
    ``foregroundDeletion``) until its dependents are gone."""
    name = f"deleted-{propagation.lower()}"
    cluster.agent.faults[name] = Fault(replay=True, replay_seconds=120)  # type: ignore[union-attr]
    created = cluster.apply(name, SPEC)
    running(cluster, name)
    uid = created["metadata"]["uid"]
    kinds = {k for k, _ in cluster.owned_by(uid)}
    assert kinds == {"Job", "Pod"}, kinds
    cluster.delete(EXP_API, EXP_PLURAL, name, propagation=propagation)
    if propagation == "Foreground":
        held = cluster.exp(name)
        assert held is None or "foregroundDeletion" in held["metadata"].get("finalizers", [])
    cluster.wait_for(lambda: cluster.exp(name) is None and cluster.owned_by(uid) == []
                     and not cluster.list("v1", "pods", f"batch.kubernetes.io/job-name={name}-g1"),
                     120, "the experiment, its Job and its pod to be gone")
    cluster.wait_for(lambda: not any(lb.get("experiment") == name for lb, _ in
                                     cluster.metric_samples("spx_experiment_phase_since_timestamp_seconds")),
                     60, "the operator to drop the deleted experiment's series")
    # nothing was written for the experiment once it was gone: no ConfigMap, no second Job
    assert [n for n in cluster.configmaps.created() if n.startswith(name)] == []
    assert cluster.jobs_created(f"{name}-") == [f"{name}-g1"]
    # The same name can be used again at once: a new incarnation, a new uid, generation 1.
    cluster.agent.faults[name] = Fault(replay=True, replay_seconds=0.3)  # type: ignore[union-attr]
    again = cluster.apply(name, SPEC)
    assert again["metadata"]["uid"] != uid
    assert cluster.wait_decided(name, timeout=180)["status"]["phase"] == "Succeeded"


def test_a_run_of_an_experiment_held_by_a_finalizer_is_stopped_when_it_is_deleted(cluster: Cluster) -> None:
    """Another controller's finalizer holds the experiment after its deletion (background): the garbage
    collector leaves its Job running until the experiment is gone — a GPU busy for a result nobody will
    see. The operator deletes the running Job at once and writes nothing for the experiment."""
    from spx_testing.cluster import experiment

    name = "held"
    cluster.agent.faults[name] = Fault(replay=True, replay_seconds=300)  # type: ignore[union-attr]
    body = experiment(name, SPEC, cluster.ns)
    body["metadata"]["finalizers"] = ["example.com/hold"]
    cluster.api.create(EXP_API, EXP_PLURAL, cluster.ns, body)
    running(cluster, name)
    cluster.delete(EXP_API, EXP_PLURAL, name)
    held = cluster.exp(name)
    assert held is not None and held["metadata"].get("deletionTimestamp")
    cluster.wait_for(lambda: cluster.get("batch/v1", "jobs", f"{name}-g1") is None, 60,
                     "the operator to delete the Job of the experiment being deleted")
    assert cluster.exp(name) is not None  # still held: the operator did not wait for the garbage collector
    assert [n for n in cluster.configmaps.created() if n.startswith(name)] == []
    assert cluster.jobs_created(f"{name}-") == [f"{name}-g1"]
    assert (cluster.exp(name) or {}).get("status", {}).get("phase") == "Running"  # no status written since
    cluster.patch(EXP_API, EXP_PLURAL, name, {"metadata": {"finalizers": None}})
    cluster.wait_for(lambda: cluster.exp(name) is None, 60, "the experiment to be gone")


def test_job_deleted_mid_run_is_infra_failed_and_timed(cluster: Cluster) -> None:
    """Someone deletes the run's Job: InfraFailed, and the run still counts in the duration histogram."""
    cluster.agent.faults["jobgone"] = Fault(replay=True, replay_seconds=60)  # type: ignore[union-attr]
    cluster.apply("jobgone", SPEC)
    running(cluster, "jobgone")
    before = duration_count(cluster)
    cluster.delete("batch/v1", "jobs", "jobgone-g1")
    obj = cluster.wait_decided("jobgone", timeout=120)
    c = condition(obj, "Decided")
    assert obj["status"]["phase"] == "Failed" and c["reason"] == "InfraFailed", obj["status"]  # type: ignore[index]
    assert "deleted before it finished" in c["message"]  # type: ignore[index]
    # the histogram is observed right after the terminal status write: wait for it, not for a fixed time
    cluster.wait_for(lambda: duration_count(cluster) == before + 1, 60, "the run to count in the duration histogram")
