"""The real operator (``kopf run -m spx.controller``, a subprocess) against the real control plane.

One operator process serves the module's namespace; the real Job controller makes the pods, the test
node agent (``nodeagent.py``) binds and runs them: the real CPU bench (``spx run``, 2 gloo ranks)
where the bench matters, a replay of a recorded real run where only the cluster's behaviour does.
The operator's own timeouts are shortened through its environment; the Job's deadline is the real
Job controller's (``activeDeadlineSeconds``, 60 s at the least).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from spx.api import KernelResult
from spx.controller.manifests.result_configmap import read_result_configmap
from spx_testing.cluster import EXP_API, EXP_PLURAL, ApiProblem, Cluster, condition
from spx_testing.controlplane import ControlPlane
from spx_testing.nodeagent import Fault
from spx_testing.specs import CPU_SPEC

pytestmark = pytest.mark.timeout(600)
NS = "lifecycle"
OPERATOR_ENV = {
    "SPX_MAX_CONCURRENT_EXPERIMENTS": "0",
    "SPX_SCHEDULE_TIMEOUT_SECONDS": "3",
    # the real Job controller waits out a back-off (~10 s) before it replaces an evicted pod: more than a
    # shorter "no pod yet" limit would allow
    "SPX_IMAGE_PULL_TIMEOUT_SECONDS": "30",
    "SPX_MAX_DISRUPTIONS": "1",
    "SPX_BENCH_IMAGE": "spx-bench:test",
}


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(control_plane, NS, tmp_path_factory.mktemp("operator-lifecycle"))
    c.start_operator(env=OPERATOR_ENV)
    c.wait_operator_ready()
    yield c
    c.close()


def fault(cluster: Cluster, name: str, **kw: Any) -> None:
    cluster.agent.faults[name] = Fault(**kw)  # type: ignore[union-attr]


def conds(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"]["conditions"]}


def assert_transitions_are_real(history: list[dict[str, Any]]) -> None:
    """lastTransitionTime of every condition changes only when its status changes."""
    last: dict[str, tuple[str, str]] = {}
    for obj in history:
        for c in (obj.get("status") or {}).get("conditions") or []:
            prev = last.get(c["type"])
            if prev is not None and prev[0] == c["status"]:
                assert c["lastTransitionTime"] == prev[1], f"{c['type']} moved without a transition: {prev} → {c}"
            last[c["type"]] = (c["status"], c["lastTransitionTime"])


def test_happy_path_end_to_end(cluster: Cluster) -> None:
    """Real CPU bench in the pod: Job → pod → termination message + log → ConfigMap → analysis → status."""
    created = cluster.apply("happy", CPU_SPEC)
    obj = cluster.wait_decided("happy", timeout=180)
    st = obj["status"]
    assert st["phase"] == "Succeeded", st.get("message")
    assert st["verdict"] in ("Pass", "Fail", "Inconclusive") and st["verdictReasons"]
    assert st["observedGeneration"] == 1 and st["jobName"] == "happy-g1"
    assert st["startTime"] and st["completionTime"]
    c = conds(obj)
    assert c["Decided"]["status"] == "True" and c["Decided"]["reason"] == st["verdict"]
    assert c["Completed"]["status"] == "True" and c["Completed"]["reason"] == "JobSucceeded"
    assert c["Scheduled"]["status"] == "True"
    assert [p["tokens"] for p in st["kernel"]["points"]] == CPU_SPEC["sweep"]["tokens"]
    assert st["kernel"]["gatherSource"] == "measured" and st["environment"]["node"] == f"{NS}-node-0"

    # The Job as specified, one pod, owned by the experiment.
    job = cluster.get("batch/v1", "jobs", "happy-g1")
    assert job is not None and job["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "spx-bench:test"
    pods = cluster.list("v1", "pods", "batch.kubernetes.io/job-name=happy-g1")
    assert len(pods) == 1 and pods[0]["status"]["phase"] == "Succeeded"
    assert cluster.jobs_created("happy-") == ["happy-g1"]

    # The full result document in the ConfigMap, and the raw outputs next to it.
    cm = cluster.get("v1", "configmaps", st["resultConfigMap"])
    assert cm is not None and cm["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    result = KernelResult.model_validate(read_result_configmap(cm))
    assert result.complete and [p.tokens for p in result.points] == CPU_SPEC["sweep"]["tokens"]
    assert json.loads(cm["data"]["summary.json"])["schemaVersion"] == "spx.dev/kernel-summary/v1"
    assert '{"kind":"result"' in cm["data"]["pod.log"]

    # Status went Pending → Running → Analyzing → Succeeded; transition times are honest.
    history = cluster.history("happy")
    phases = [o["status"]["phase"] for o in history if o.get("status")]
    assert [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p] == ["Pending", "Running", "Analyzing", "Succeeded"]
    assert_transitions_are_real(history)
    assert not any(o["metadata"].get("finalizers") for o in history)

    reasons = {e["reason"] for e in cluster.events("happy")}
    assert {"Running", f"Verdict{st['verdict']}"} <= reasons

    latency = {(lb["candidate"], lb["tokens"]) for lb, _ in cluster.metric_samples("spx_kernel_latency_seconds")
               if lb["experiment"] == "happy"}
    assert latency == {(c, str(t)) for c in ("replicated", "split") for t in CPU_SPEC["sweep"]["tokens"]}
    verdicts = {lb["verdict"]: v for lb, v in cluster.metric_samples("spx_verdict") if lb["experiment"] == "happy"}
    assert verdicts[st["verdict"]] == 1.0 and sum(verdicts.values()) == 1.0

    # Deleting the experiment removes the Job, its pod and the ConfigMap (owner references), leaves
    # no finalizer behind and drops its metric series.
    cluster.delete(EXP_API, EXP_PLURAL, "happy")
    assert cluster.exp("happy") is None
    # the real garbage collector works asynchronously (the emulator deleted dependents on the spot)
    cluster.wait_for(lambda: cluster.owned_by(created["metadata"]["uid"]) == [], 60, "Job, pod and ConfigMap collected")
    cluster.wait_for(lambda: 'experiment="happy"' not in cluster.metrics_text(), 60, "metrics of happy removed")


def test_invalid_spec_never_reaches_the_cluster(cluster: Cluster) -> None:
    """The CRD's CEL rules refuse what spx.api refuses (the emulator evaluated no CEL, so there this spec
    reached the operator, which decided InvalidSpec; that path stays table-tested in the unit tests)."""
    with pytest.raises(ApiProblem) as err:
        cluster.apply("invalid", {**CPU_SPEC, "sweep": {"tokens": [2048, 8]}})
    assert err.value.code == 422 and "spec.sweep" in err.value.message and "increasing order" in err.value.message
    assert cluster.exp("invalid") is None and cluster.jobs_created("invalid-") == []


def test_an_edit_to_an_invalid_spec_is_refused_and_the_run_goes_on(cluster: Cluster) -> None:
    fault(cluster, "fixed", replay=True, replay_seconds=0.2)
    cluster.apply("fixed", CPU_SPEC)
    with pytest.raises(ApiProblem) as err:
        cluster.patch(EXP_API, EXP_PLURAL, "fixed", {"spec": {"sweep": {"tokens": [64, 8]}}})
    assert err.value.code == 422 and "increasing order" in err.value.message
    obj = cluster.wait_decided("fixed", timeout=120)
    assert obj["metadata"]["generation"] == 1
    assert obj["status"]["phase"] == "Succeeded" and obj["status"]["jobName"] == "fixed-g1"
    assert_transitions_are_real(cluster.history("fixed"))


def test_operator_logs_are_json(cluster: Cluster) -> None:
    lines = cluster.operator_logs[-1].read_text().splitlines()
    assert lines
    for line in lines:
        assert isinstance(json.loads(line), dict), line


def test_crd_schema_rejects_what_a_schema_can(cluster: Cluster) -> None:
    with pytest.raises(ApiProblem) as err:
        cluster.apply("badtype", {**CPU_SPEC, "parallelism": {"tensorParallelSize": "eight"}})
    assert err.value.code == 422


def test_benchmark_crash_is_benchmark_failed_and_keeps_partial_output(cluster: Cluster) -> None:
    """The real bench is SIGKILLed by the 'OOM killer' after its first point."""
    fault(cluster, "crash", kill_after_points=1, oom=True)
    cluster.apply("crash", CPU_SPEC)
    obj = cluster.wait_decided("crash", timeout=120)
    st = obj["status"]
    c = conds(obj)
    assert st["phase"] == "Failed" and c["Decided"]["reason"] == "BenchmarkFailed", st["message"]
    assert c["Completed"]["reason"] == "OOMKilled" and "exit code 137" in c["Decided"]["message"]
    assert len(st["kernel"]["points"]) >= 1  # what was measured before the crash
    cm = cluster.get("v1", "configmaps", st["resultConfigMap"])
    assert cm is not None and '{"kind":"point"' in cm["data"]["pod.log"]
    assert "termination message: empty" in cm["data"]["problems.txt"]


def test_bench_rejecting_its_input_is_benchmark_failed(cluster: Cluster) -> None:
    """A CUDA experiment on a GPU-less node: the real `spx run` exits 2."""
    spec = {**CPU_SPEC, "kernel": {**CPU_SPEC["kernel"], "device": "cuda", "timer": "auto"}}
    cluster.apply("nogpu", spec)
    obj = cluster.wait_decided("nogpu", timeout=120)
    c = conds(obj)
    assert obj["status"]["phase"] == "Failed" and c["Decided"]["reason"] == "BenchmarkFailed"
    assert c["Completed"]["reason"] == "InvalidInput", c["Decided"]["message"]


def test_evicted_pod_is_retried(cluster: Cluster) -> None:
    fault(cluster, "evicted", evict=1, evict_after=0.5, replay=True, replay_seconds=1.5)
    cluster.apply("evicted", CPU_SPEC)
    obj = cluster.wait_decided("evicted", timeout=180)
    assert obj["status"]["phase"] == "Succeeded", obj["status"]["message"]
    # The Eviction API deleted the first pod (the emulator kept it, Failed): the Job controller's
    # events show both pods it created.
    created = [e for e in cluster.events("evicted-g1") if e["reason"] == "SuccessfulCreate"]
    assert len(created) == 2, created
    assert len(cluster.list("v1", "pods", "batch.kubernetes.io/job-name=evicted-g1")) == 1
    assert cluster.jobs_created("evicted-") == ["evicted-g1"]
    assert_transitions_are_real(cluster.history("evicted"))


def test_evictions_past_the_retry_budget_are_infra_failed(cluster: Cluster) -> None:
    """Failure mode 7: the Eviction API deletes each evicted pod; the operator counts the disruptions
    from the pods' last state (``DisruptionTarget``), not among the pods still listed."""
    fault(cluster, "evicted-often", evict=10, evict_after=0.3, replay=True, replay_seconds=30)
    cluster.apply("evicted-often", CPU_SPEC)
    obj = cluster.wait_decided("evicted-often", timeout=180)
    c = conds(obj)
    assert c["Decided"]["reason"] == "InfraFailed" and c["Completed"]["reason"] == "Evicted"
    assert "disrupted 2 times (retry budget 1)" in c["Decided"]["message"]
    cluster.wait_for(lambda: cluster.get("batch/v1", "jobs", "evicted-often-g1") is None, 10,
                     "the operator to delete the Job it gave up on")


def test_deadline_is_infra_failed(cluster: Cluster) -> None:
    """Failure mode 1: the Job controller deletes the running pod at the deadline before it sets ``Failed``;
    the run that ran is DeadlineExceeded (never NeverScheduled, whatever the operator saw in between)."""
    fault(cluster, "slow", replay=True, replay_seconds=120)
    cluster.apply("slow", {**CPU_SPEC, "timeoutSeconds": 60})  # the real Job controller's 60 s deadline
    obj = cluster.wait_decided("slow", timeout=300)
    c = conds(obj)
    assert c["Decided"]["reason"] == "InfraFailed" and c["Completed"]["reason"] == "DeadlineExceeded"
    assert "activeDeadlineSeconds=60" in c["Decided"]["message"]
    assert c["Scheduled"]["status"] == "True"


def test_an_eviction_after_the_pod_start_limit_is_retried(cluster: Cluster) -> None:
    """Failure mode 4: an eviction later than SPX_IMAGE_PULL_TIMEOUT_SECONDS (30 s here) after the Job
    started; until the Job controller's replacement appears (~10 s) the wait is counted from the
    eviction, not from the Job's start — the run goes on and succeeds."""
    fault(cluster, "late-evict", evict=1, evict_after=32, replay=True, replay_seconds=36)
    cluster.apply("late-evict", CPU_SPEC)
    obj = cluster.wait_decided("late-evict", timeout=300)
    assert obj["status"]["phase"] == "Succeeded", obj["status"]["message"]
    assert cluster.jobs_created("late-evict-") == ["late-evict-g1"]
    created = [e for e in cluster.events("late-evict-g1") if e["reason"] == "SuccessfulCreate"]
    assert len(created) == 2, created


def test_unschedulable_past_the_timeout_is_infra_failed(cluster: Cluster) -> None:
    fault(cluster, "nofit", unschedulable=True)
    cluster.apply("nofit", CPU_SPEC)
    waiting = cluster.wait_for(lambda: (o := cluster.exp("nofit")) and (condition(o, "Scheduled") or {}).get("reason") == "Unschedulable" and o,
                               120, "Scheduled=False/Unschedulable")
    assert waiting["status"]["phase"] == "Pending"
    obj = cluster.wait_decided("nofit", timeout=120)
    c = conds(obj)
    assert c["Decided"]["reason"] == "InfraFailed" and c["Completed"]["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in c["Decided"]["message"]
    cluster.wait_for(lambda: cluster.get("batch/v1", "jobs", "nofit-g1") is None, 60, "Job deleted")


def test_image_pull_error_is_infra_failed(cluster: Cluster) -> None:
    fault(cluster, "nopull", image_pull="ErrImagePull")
    cluster.apply("nopull", CPU_SPEC)
    obj = cluster.wait_decided("nopull", timeout=120)
    c = conds(obj)
    assert c["Decided"]["reason"] == "InfraFailed" and c["Completed"]["reason"] == "ImagePullFailed"
    assert "ImagePullBackOff" in c["Decided"]["message"]


def test_malformed_result_is_failed_with_a_reason_and_kept(cluster: Cluster) -> None:
    fault(cluster, "garbage", replay=True, replay_seconds=0.2, termination_message="Traceback (most recent call last): not a summary", drop_result_line=True)
    cluster.apply("garbage", CPU_SPEC)
    obj = cluster.wait_decided("garbage", timeout=120)
    c = conds(obj)
    assert obj["status"]["phase"] == "Failed" and c["Decided"]["reason"] == "BenchmarkFailed"
    msg = c["Decided"]["message"]
    assert "exited 0 but left no usable result" in msg and "not JSON" in msg and "no {" in msg
    assert c["Completed"]["reason"] == "JobSucceeded"
    cm = cluster.get("v1", "configmaps", obj["status"]["resultConfigMap"])
    assert cm is not None and cm["data"]["summary.json"].startswith("Traceback")
    assert '{"kind":"point"' in cm["data"]["pod.log"]
    assert len(obj["status"]["kernel"]["points"]) == len(CPU_SPEC["sweep"]["tokens"])


def test_summary_alone_is_enough_when_the_log_is_missing_its_result(cluster: Cluster) -> None:
    fault(cluster, "summary-only", replay=True, replay_seconds=0.2, drop_result_line=True)
    cluster.apply("summary-only", CPU_SPEC)
    obj = cluster.wait_decided("summary-only", timeout=120)
    st = obj["status"]
    assert st["phase"] == "Succeeded" and st["verdict"] in ("Pass", "Fail", "Inconclusive")
    cm = cluster.get("v1", "configmaps", st["resultConfigMap"])
    assert cm is not None and read_result_configmap(cm) is None and "no {" in cm["data"]["problems.txt"]

