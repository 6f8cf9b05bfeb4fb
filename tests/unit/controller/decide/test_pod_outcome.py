"""spx.controller.decide.pod_outcome.observe: a Job and its pods classified — still going, succeeded, or failed
and whose fault — table-tested over the start-up (pod_startup), disruption (pod_disruption) and exit
(pod_exit) readings it orders."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from spx.controller.decide.observation import Timeouts
from spx.controller.decide.pod_outcome import observe

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"
T2 = "2026-01-01T00:09:00Z"  # a minute before NOW
NOW = dt.datetime(2026, 1, 1, 0, 10, tzinfo=dt.UTC)


JOB_UID = "job-uid"


def mkjob(conditions: list[dict[str, Any]] | None = None, suspend: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": "e-g1", "uid": JOB_UID}, "spec": {"suspend": suspend, "activeDeadlineSeconds": 600},
            "status": {"conditions": conditions or []}}


def mkpod(name: str, phase: str = "Pending", *, created: str = T0, node: str | None = None,
          conditions: list[dict[str, Any]] | None = None, state: dict[str, Any] | None = None,
          reason: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if state is not None:
        status["containerStatuses"] = [{"name": "bench", "state": state}]
    if reason:
        status["reason"] = reason
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "ownerReferences": [{"kind": "Job", "uid": JOB_UID, "controller": True}]},
            "spec": spec, "status": status}


def true(type_: str, reason: str = "", message: str = "", at: str = T0) -> dict[str, Any]:
    return {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": at}


def terminated(code: int, reason: str = "Error", message: str | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"terminated": {"exitCode": code, "reason": reason}}
    if message:
        t["terminated"]["message"] = message
    return t


EVICTED = true("DisruptionTarget", "EvictionByEvictionAPI", "Eviction API: evicting")
TIMEOUTS = Timeouts(schedule_timeout_s=300, image_pull_timeout_s=120, max_disruptions=2, replacement_timeout_s=120)


@pytest.mark.parametrize(("job", "pods", "state", "outcome", "reason"), [
    # still going
    (mkjob(suspend=True), [], "suspended", None, "Suspended"),
    (mkjob(), [], "pending", None, "Pending"),
    (mkjob(), [mkpod("p")], "pending", None, "Pending"),
    (mkjob(), [mkpod("p", node="n1", conditions=[true("PodScheduled")])], "scheduled", None, "PodScheduled"),
    (mkjob(), [mkpod("p", "Running", node="n1")], "running", None, "Running"),
    (mkjob(), [mkpod("p", "Succeeded", node="n1", state=terminated(0, "Completed"))], "running", None, "Running"),
    # evicted: waiting for the replacement, bounded from the disruption (not from the Job's start)
    (mkjob(), [mkpod("p", "Failed", node="n1", state=terminated(137),
                     conditions=[true("DisruptionTarget", "EvictionByEvictionAPI", "Eviction API: evicting",
                                      at="2026-01-01T00:09:30Z")])], "transition", None, "Replacing"),
    (mkjob(), [mkpod("p", "Failed", node="n1", state=terminated(137), conditions=[EVICTED])],
     "failed", "InfraFailed", "PodCreateFailed"),
    (mkjob(), [mkpod("p", "Failed", conditions=[EVICTED]), mkpod("q", "Running", created=T1, node="n1")], "running", None, "Running"),
    (mkjob(), [mkpod("p", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": "0/4 nodes: Insufficient nvidia.com/gpu", "lastTransitionTime": T2}])],
     "unschedulable", None, "Unschedulable"),
    (mkjob(), [mkpod("p", node="n1", conditions=[true("PodScheduled", at=T2)],
                     state={"waiting": {"reason": "ImagePullBackOff"}})], "scheduled", None, "ImagePullBackOff"),
    # succeeded
    (mkjob([true("Complete")]), [mkpod("p", "Succeeded", node="n1", state=terminated(0, "Completed"))], "succeeded", None, "JobSucceeded"),
    # benchmark failures
    (mkjob([true("Failed", "PodFailurePolicy")]), [mkpod("p", "Failed", node="n1", state=terminated(1))],
     "failed", "BenchmarkFailed", "BenchmarkCrashed"),
    (mkjob([true("Failed", "PodFailurePolicy")]), [mkpod("p", "Failed", node="n1", state=terminated(2))],
     "failed", "BenchmarkFailed", "InvalidInput"),
    (mkjob([true("Failed", "BackoffLimitExceeded")]), [mkpod("p", "Failed", node="n1", state=terminated(137, "OOMKilled"))],
     "failed", "BenchmarkFailed", "OOMKilled"),
    (mkjob([true("Failed", "PodFailurePolicy")]), [mkpod("p", "Failed", node="n1", state=terminated(139))],
     "failed", "BenchmarkFailed", "BenchmarkCrashed"),
    # infrastructure failures
    (mkjob([true("Failed", "DeadlineExceeded")]), [mkpod("p", "Failed", node="n1", state=terminated(137), reason="DeadlineExceeded")],
     "failed", "InfraFailed", "DeadlineExceeded"),
    (mkjob([true("Failed", "BackoffLimitExceeded")]), [mkpod("p", "Failed", node="n1", reason="Evicted")],
     "failed", "InfraFailed", "Evicted"),
    (mkjob([true("Failed", "BackoffLimitExceeded")]), [], "failed", "InfraFailed", "JobFailed"),
    (mkjob(), [mkpod(f"p{i}", "Failed", created=f"2026-01-01T00:0{i}:00Z", conditions=[EVICTED]) for i in range(3)],
     "failed", "InfraFailed", "Evicted"),
    (mkjob(), [mkpod("p", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": "no GPUs", "lastTransitionTime": T0}])],
     "failed", "InfraFailed", "Unschedulable"),
    (mkjob(), [mkpod("p", node="n1", conditions=[true("PodScheduled", at=T0)],
                     state={"waiting": {"reason": "ImagePullBackOff", "message": "not found"}})],
     "failed", "InfraFailed", "ImagePullFailed"),
    (mkjob(), [mkpod("p", node="n1", conditions=[true("PodScheduled", at=T1)], state={"waiting": {"reason": "InvalidImageName"}})],
     "failed", "InfraFailed", "ImagePullFailed"),
    (mkjob(), [mkpod("p", node="n1", conditions=[true("PodScheduled", at=T0)],
                     state={"waiting": {"reason": "CreateContainerConfigError"}})],
     "failed", "InfraFailed", "ContainerCreateFailed"),
])
def test_observe(job: dict, pods: list[dict], state: str, outcome: str | None, reason: str) -> None:
    obs = observe(job, pods, NOW, TIMEOUTS)
    assert (obs.state, obs.outcome, obs.reason) == (state, outcome, reason), obs.message


def test_operator_aborts_only_what_kubernetes_would_keep_retrying() -> None:
    unschedulable = mkpod("p", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "lastTransitionTime": T0}])
    assert observe(mkjob(), [unschedulable], NOW, TIMEOUTS).abort
    deadline = observe(mkjob([true("Failed", "DeadlineExceeded")]), [], NOW, TIMEOUTS)
    assert deadline.outcome == "InfraFailed" and not deadline.abort


def test_timeouts_say_when_to_look_again() -> None:
    pod = mkpod("p", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                  "lastTransitionTime": T1}])
    waiting = observe(mkjob(), [pod], NOW, Timeouts(schedule_timeout_s=900))
    assert waiting.state == "unschedulable" and waiting.recheck_after_s == pytest.approx(600)
    assert observe(mkjob(), [pod], NOW, Timeouts(schedule_timeout_s=300)).state == "failed"


def test_a_job_that_creates_no_pod_fails_fast_as_pod_create_failed() -> None:
    """FailedCreate (quota, webhook, Pod Security): no pod past the start-up timeout → InfraFailed."""
    job = mkjob()
    job["metadata"]["creationTimestamp"] = T0
    job["status"]["startTime"] = T2  # the Job controller's first sync: count from here
    waiting = observe(job, [], NOW, TIMEOUTS)
    assert waiting.state == "pending" and waiting.recheck_after_s == pytest.approx(60)
    job["status"]["startTime"] = T1
    failed = observe(job, [], NOW, TIMEOUTS,
                     failed_create='FailedCreate: pods "e-g1-abcde" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=8')
    assert (failed.state, failed.outcome, failed.reason, failed.abort) == ("failed", "InfraFailed", "PodCreateFailed", True)
    assert failed.message.startswith("PodCreateFailed: Job e-g1 created no pod in 300s (limit 120s)")
    assert "exceeded quota" in failed.message
    # Without the event, a Job condition's message is the detail; without either, say so.
    job["status"]["conditions"] = [{"type": "FailureTarget", "status": "False", "reason": "Quota",
                                    "message": "pod creation refused", "lastTransitionTime": T1}]
    assert "Quota: pod creation refused" in observe(job, [], NOW, TIMEOUTS).message
    job["status"]["conditions"] = []
    assert "no FailedCreate event" in observe(job, [], NOW, TIMEOUTS).message
    # No startTime yet: counted from creation.
    del job["status"]["startTime"]
    assert observe(job, [], NOW, TIMEOUTS).reason == "PodCreateFailed"


def test_a_resumed_job_counts_from_its_resumption_not_its_creation() -> None:
    job = mkjob([{"type": "Suspended", "status": "True", "reason": "JobSuspended", "lastTransitionTime": T0}])
    job["metadata"]["creationTimestamp"] = T0
    # Kueue unsuspended it; the Job controller has not synced yet (no startTime, Suspended still True).
    assert observe(job, [], NOW, TIMEOUTS).state == "pending"
    job["status"]["conditions"] = [{"type": "Suspended", "status": "False", "reason": "JobResumed", "lastTransitionTime": T2}]
    obs = observe(job, [], NOW, TIMEOUTS)
    assert obs.state == "pending" and obs.recheck_after_s == pytest.approx(60)


def test_pods_of_other_jobs_are_ignored() -> None:
    other = mkpod("x", "Failed", state=terminated(1))
    other["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    assert observe(mkjob(), [other], NOW, TIMEOUTS).state == "pending"


T_DEL = "2026-01-01T00:08:30Z"  # deletion asked for at 00:08:00 (grace 30 s)


@pytest.mark.parametrize(("code", "reason", "finished", "deleted", "expected"), [
    (1, "Error", T2, True, ("InfraFailed", "PodDeleted")),            # spx run on SIGTERM: exit 1
    (143, "Error", T2, True, ("InfraFailed", "PodDeleted")),          # a bench without a handler
    (137, "Error", None, True, ("InfraFailed", "PodDeleted")),        # SIGKILL, no finishedAt
    (137, "OOMKilled", T2, True, ("BenchmarkFailed", "OOMKilled")),   # its own memory, whatever came after
    (1, "Error", T1, True, ("BenchmarkFailed", "BenchmarkCrashed")),  # crashed at 00:05, deleted later
    (1, "Error", None, True, ("BenchmarkFailed", "BenchmarkCrashed")),  # no finishedAt, no signal
    (143, "Error", T2, False, ("BenchmarkFailed", "BenchmarkCrashed")),  # a signal no deletion explains
    (1, "Error", T2, False, ("BenchmarkFailed", "BenchmarkCrashed")),
])
def test_a_pod_deleted_while_the_bench_ran_is_not_a_benchmark_crash(code: int, reason: str, finished: str | None,
                                                                    deleted: bool, expected: tuple[str, str]) -> None:
    """A pod deleted by someone (no ``DisruptionTarget``: not the Eviction API) ends with its deletion's
    SIGTERM; the Job fails by its pod failure policy. The bench did not crash: ``InfraFailed``/``PodDeleted``
    — when the deletion was asked for before the container ended, not for a pod removed after a crash."""
    term: dict[str, Any] = {"exitCode": code, "reason": reason, **({"finishedAt": finished} if finished else {})}
    pod = mkpod("p", "Failed", node="n1", state={"terminated": term})
    if deleted:
        pod["metadata"].update(deletionTimestamp=T_DEL, deletionGracePeriodSeconds=30)
    job = mkjob([{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}])
    o = observe(job, [], NOW, Timeouts(), gone=[pod])
    assert (o.state, o.outcome, o.reason) == ("failed", *expected)
    assert ("was deleted while the bench ran" in o.message) == (expected[1] == "PodDeleted")
