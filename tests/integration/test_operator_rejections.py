"""The real operator against an API server that refuses its Job, or a Job controller that cannot make the pod.

The refusals are the real API server's: a ValidatingAdmissionPolicy (CEL admission, built in) in the
module's namespace denies chosen Jobs with 422 ``Invalid`` or 403 ``Forbidden``, and chosen pods, so
that the real Job controller gets a refusal and posts ``FailedCreate`` events. Every such run must
end ``Decided=True`` (what ``kubectl wait --for=condition=Decided`` waits on) instead of being
retried or waited on until the deadline:

- Job create answered 422 (the Job is invalid) → ``Failed``, ``InvalidSpec`` with the server's message;
- Job create answered 403 (quota, Pod Security admission, a webhook) → ``Failed``, ``InfraFailed``;
- the Job exists but its pod is never created (``FailedCreate`` events) → ``InfraFailed`` with
  ``PodCreateFailed: …`` after the start-up timeout, and the Job is deleted;
- the result ConfigMap is refused (403: a quota on ConfigMaps) → decided all the same (the verdict, the
  points in the status), no ConfigMap named, a ``ResultNotStored`` Warning event quoting the refusal;
- the operator's own policy (``SPX_POLICY``) refuses the spec → ``Failed``, ``InvalidSpec`` naming the
  rule, a ``PolicyViolation`` event, and no Job is ever created.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spx_testing.cluster import Cluster, condition
from spx_testing.controlplane import ControlPlane
from spx_testing.kubeapi import ApiProblem
from spx_testing.nodeagent import Fault
from spx_testing.specs import CPU_SPEC

pytestmark = pytest.mark.timeout(600)

NS = "rejections"
SPEC = CPU_SPEC
OPERATOR_ENV = {
    "SPX_MAX_CONCURRENT_EXPERIMENTS": "1",  # a rejected run must give its slot back
    "SPX_SCHEDULE_TIMEOUT_SECONDS": "3",
    "SPX_IMAGE_PULL_TIMEOUT_SECONDS": "5",
    "SPX_BENCH_IMAGE": "spx-bench:test",  # the operator's own image: not subject to the policy
    "SPX_POLICY": '{"imageRegistries": ["ghcr.io/spx-dev/"], "priorityClasses": []}',
}
INVALID_MSG = "spec.template.spec.containers[0].resources.requests: must be less than or equal to cpu limit"
QUOTA_MSG = "exceeded quota: team-quota, requested: count/jobs.batch=1, used: count/jobs.batch=10, limited: count/jobs.batch=10"
PSA_MSG = 'violates PodSecurity "restricted:latest": seccompProfile'
CM_QUOTA_MSG = "exceeded quota: cm-quota, requested: count/configmaps=1, used: count/configmaps=50, limited: count/configmaps=50"


def policy(name: str, resource: str, group: str, experiment: str, reason: str, message: str) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy denying creates of ``resource`` labelled ``experiment``, and its binding."""
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": [resource]}]},
                  "validations": [{"expression": f"!has(object.metadata.labels) || "
                                                 f"!('bench.spx.dev/experiment' in object.metadata.labels) || "
                                                 f"object.metadata.labels['bench.spx.dev/experiment'] != '{experiment}'",
                                   "reason": reason, "message": message}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}}},
    ]


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(control_plane, NS, tmp_path_factory.mktemp("operator-rejections"),
                default_fault=Fault(replay=True, replay_seconds=0.2))
    objs = (policy("spx-test-invalid-job", "jobs", "batch", "bad422", "Invalid", INVALID_MSG)
            + policy("spx-test-forbidden-job", "jobs", "batch", "forbid", "Forbidden", QUOTA_MSG)
            + policy("spx-test-forbidden-pod", "pods", "", "nopod", "Forbidden", PSA_MSG)
            + policy("spx-test-forbidden-configmap", "configmaps", "", "nocm", "Forbidden", CM_QUOTA_MSG))
    for obj in objs:
        c.api.apply(obj)

    def enforced() -> bool:  # policies take effect once the API server has compiled them
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "labels": {"bench.spx.dev/experiment": "nopod"}},
               "spec": {"containers": [{"name": "c", "image": "x"}]}}
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe", "labels": {"bench.spx.dev/experiment": "forbid"}},
               "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "labels": {"bench.spx.dev/experiment": "nocm"}}}
        refused = 0
        for api_version, plural, body in (("v1", "pods", pod), ("batch/v1", "jobs", job), ("v1", "configmaps", cm)):
            try:
                c.api.create(api_version, plural, NS, body, params={"dryRun": "All"})
            except ApiProblem as p:
                refused += p.code == 403
        return refused == 3

    c.wait_for(enforced, 60, "the admission policies to be enforced")
    c.start_operator(env=OPERATOR_ENV)
    c.wait_operator_ready()
    yield c
    c.close()
    for obj in objs:
        plural = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
                  "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[obj["kind"]]
        c.api.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{obj['metadata']['name']}")


def test_job_invalid_to_the_api_server_is_decided_invalid_spec(cluster: Cluster) -> None:
    cluster.apply("bad422", SPEC)
    obj = cluster.wait_decided("bad422", timeout=120)
    st = obj["status"]
    assert st["phase"] == "Failed"
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "InvalidSpec"
    assert "must be less than or equal to cpu limit" in decided["message"]
    assert condition(obj, "Completed")["status"] == "True"  # type: ignore[index]
    assert st.get("completionTime")
    assert cluster.list("batch/v1", "jobs", "bench.spx.dev/experiment=bad422") == []
    cluster.wait_for(lambda: [e for e in cluster.events("bad422") if e["reason"] == "InvalidSpec"
                              and e["type"] == "Warning"], 60, "an InvalidSpec event")


def test_job_refused_by_the_api_server_is_decided_infra_failed(cluster: Cluster) -> None:
    cluster.apply("forbid", SPEC)
    obj = cluster.wait_decided("forbid", timeout=120)
    assert obj["status"]["phase"] == "Failed"
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "InfraFailed"
    assert decided["message"].startswith("the API server refused the Job forbid-g1: ")
    assert "exceeded quota: team-quota" in decided["message"]
    cluster.wait_for(lambda: [e for e in cluster.events("forbid") if e["reason"] == "InfraFailed"], 60, "an InfraFailed event")
    # The slot (limit 1) was given back: the next experiment runs to a verdict.
    cluster.apply("after-forbid", SPEC)
    after = cluster.wait_decided("after-forbid", timeout=180)
    assert after["status"]["phase"] == "Succeeded", after["status"].get("message")


def test_a_pod_that_is_never_created_fails_fast(cluster: Cluster) -> None:
    cluster.apply("nopod", SPEC)
    obj = cluster.wait_decided("nopod", timeout=120)
    assert obj["status"]["phase"] == "Failed"
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "InfraFailed"
    assert decided["message"].startswith("PodCreateFailed: Job nopod-g1 created no pod"), decided["message"]
    assert "violates PodSecurity" in decided["message"]
    assert condition(obj, "Completed")["reason"] == "PodCreateFailed"  # type: ignore[index]
    # The operator gave up on the Job, which Kubernetes would keep retrying: it deletes it.
    cluster.wait_for(lambda: not cluster.get("batch/v1", "jobs", "nopod-g1"), 60, "the Job to be deleted")


def test_a_result_configmap_refused_by_a_quota_does_not_hold_the_run(cluster: Cluster) -> None:
    """The run succeeds but the namespace's quota refuses its result ConfigMap (403, every time): the
    run is decided at once with its verdict and points instead of staying ``Analyzing`` for ever (the
    create was retried with the error back-off, never decided)."""
    cluster.apply("nocm", SPEC)
    obj = cluster.wait_decided("nocm", timeout=180)
    st = obj["status"]
    assert st["phase"] == "Succeeded" and st.get("verdict") in ("Pass", "Fail", "Inconclusive"), st.get("message")
    assert [p["tokens"] for p in st["kernel"]["points"]] == SPEC["sweep"]["tokens"]
    assert "resultConfigMap" not in st
    assert cluster.get("v1", "configmaps", "nocm-g1-result") is None
    events = cluster.wait_for(lambda: [e for e in cluster.events("nocm") if e["reason"] == "ResultNotStored"], 60,
                              "a ResultNotStored event")
    assert events[0]["type"] == "Warning" and "exceeded quota: cm-quota" in events[0]["message"]


def test_a_result_configmap_name_taken_by_someone_elses_is_not_overwritten(cluster: Cluster) -> None:
    """A ConfigMap the experiment does not own already has the result ConfigMap's name: it is left as it
    is (it used to be overwritten with the run's outputs), and the run is decided with its verdict."""
    mine = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "squat-g1-result"}, "data": {"mine": "keep"}}
    cluster.api.create("v1", "configmaps", cluster.ns, mine)
    cluster.apply("squat", SPEC)
    obj = cluster.wait_decided("squat", timeout=180)
    st = obj["status"]
    assert st["phase"] == "Succeeded" and st.get("verdict"), st.get("message")
    assert "resultConfigMap" not in st
    cm = cluster.get("v1", "configmaps", "squat-g1-result")
    assert cm is not None and cm["data"] == {"mine": "keep"} and not cm.get("binaryData")
    assert not cm["metadata"].get("ownerReferences")
    events = cluster.wait_for(lambda: [e for e in cluster.events("squat") if e["reason"] == "ResultNotStored"], 60,
                              "a ResultNotStored event")
    assert "not owned by this experiment" in events[0]["message"]


def test_a_spec_the_policy_refuses_never_gets_a_job(cluster: Cluster) -> None:
    cluster.apply("policy", {**SPEC, "image": "docker.io/evil/miner:1"})
    obj = cluster.wait_decided("policy", timeout=60)
    assert obj["status"]["phase"] == "Failed"
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "InvalidSpec"
    assert decided["message"].startswith("policy.imageRegistries: spec.image 'docker.io/evil/miner:1' is not from an "
                                         "allowed registry (ghcr.io/spx-dev/)"), decided["message"]
    assert condition(obj, "Scheduled")["reason"] == "PolicyViolation"  # type: ignore[index]
    cluster.wait_for(lambda: [e for e in cluster.events("policy") if e["reason"] == "PolicyViolation"
                              and e["type"] == "Warning"], 30, "a PolicyViolation event")
    assert cluster.jobs_created("policy-") == []
    assert cluster.list("batch/v1", "jobs", "bench.spx.dev/experiment=policy") == []


def test_reconciles_are_timed_and_the_work_queue_depth_is_exported(cluster: Cluster) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    cluster.apply("timed", SPEC)
    cluster.wait_decided("timed", timeout=120)
    samples = [s for fam in text_string_to_metric_families(cluster.metrics_text()) for s in fam.samples]  # one scrape

    def by_outcome(name: str) -> dict[str, float]:
        return {s.labels["outcome"]: s.value for s in samples if s.name == name and s.labels["handler"] == "experiment"}

    timed, counted = by_outcome("spx_reconcile_duration_seconds_count"), by_outcome("spx_reconcile_total")
    assert counted and set(counted) <= set(timed), (timed, counted)
    for outcome, n in counted.items():  # (a scrape may fall between the count and the observation)
        assert n - 1 <= timed[outcome] <= n, (outcome, timed, counted)
    (depth,) = [s.value for s in samples if s.name == "spx_workqueue_depth"]
    assert depth >= 0
