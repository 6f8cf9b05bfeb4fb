"""The real operator against an API server that refuses its Job, or a Job controller that cannot make the pod.

Every such run must end ``Decided=True`` (what ``kubectl wait --for=condition=Decided`` waits on)
instead of being retried or waited on until the deadline:

- Job create answered 400/422 (the Job is invalid) → ``Failed``, ``InvalidSpec`` with the server's message;
- Job create answered 403 (quota, Pod Security admission, a webhook) → ``Failed``, ``InfraFailed``;
- the Job exists but its pod is never created (``FailedCreate`` events) → ``InfraFailed`` with
  ``PodCreateFailed: …`` after the start-up timeout, and the Job is deleted;
- the operator's own policy (``SPX_POLICY``) refuses the spec → ``Failed``, ``InvalidSpec`` naming the
  rule, a ``PolicyViolation`` event, and no Job is ever created.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from emulator import Cluster, condition
from kubelet import Fault, Kubelet
from specs import CPU_SPEC

from spx.api.crd import build_crd

pytestmark = pytest.mark.timeout(300)

SPEC = CPU_SPEC
OPERATOR_ENV = {
    "SPX_MAX_CONCURRENT_EXPERIMENTS": "1",  # a rejected run must give its slot back
    "SPX_SCHEDULE_TIMEOUT_SECONDS": "3",
    "SPX_IMAGE_PULL_TIMEOUT_SECONDS": "2",
    "SPX_BENCH_IMAGE": "spx-bench:test",  # the operator's own image: not subject to the policy
    "SPX_POLICY": '{"imageRegistries": ["ghcr.io/spx-dev/"], "priorityClasses": []}',
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("operator-rejections")
    c = Cluster(workdir, kubelet_factory=lambda url: Kubelet(
        url, workdir, time_scale=0.05, default_fault=Fault(canned=True, canned_seconds=0.2)))
    c.emulator.install_crd(build_crd())
    c.start_operator(env=OPERATOR_ENV)
    c.wait_operator_ready()
    yield c
    c.close()


def reject(cluster: Cluster, experiment: str, code: int, reason: str, message: str) -> None:
    cluster.call(lambda: cluster.emulator.reject_creates.__setitem__(("jobs", f"{experiment}-g[0-9]+"), (code, reason, message)))


def test_job_invalid_to_the_api_server_is_decided_invalid_spec(cluster: Cluster) -> None:
    msg = 'Job.batch "bad422-g1" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: "32": must be less than or equal to cpu limit'
    reject(cluster, "bad422", 422, "Invalid", msg)
    cluster.apply("bad422", SPEC)
    obj = cluster.wait_decided("bad422", timeout=30)
    st = obj["status"]
    assert st["phase"] == "Failed"
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "InvalidSpec"
    assert "must be less than or equal to cpu limit" in decided["message"]
    assert condition(obj, "Completed")["status"] == "True"  # type: ignore[index]
    assert st.get("completionTime")
    assert cluster.list("batch/v1", "jobs", "default", selector="bench.spx.dev/experiment=bad422") == []
    cluster.wait_for(lambda: [e for e in cluster.events("bad422") if e["reason"] == "InvalidSpec"
                              and e["type"] == "Warning"], 10, "an InvalidSpec event")


def test_job_refused_by_the_api_server_is_decided_infra_failed(cluster: Cluster) -> None:
    msg = 'jobs.batch "forbid-g1" is forbidden: exceeded quota: team-quota, requested: count/jobs.batch=1, used: count/jobs.batch=10, limited: count/jobs.batch=10'
    reject(cluster, "forbid", 403, "Forbidden", msg)
    cluster.apply("forbid", SPEC)
    obj = cluster.wait_decided("forbid", timeout=30)
    assert obj["status"]["phase"] == "Failed"
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "InfraFailed"
    assert decided["message"].startswith("the API server refused the Job forbid-g1: ")
    assert "exceeded quota: team-quota" in decided["message"]
    cluster.wait_for(lambda: [e for e in cluster.events("forbid") if e["reason"] == "InfraFailed"], 10, "an InfraFailed event")
    # The slot (limit 1) was given back: the next experiment runs to a verdict.
    cluster.apply("after-forbid", SPEC)
    after = cluster.wait_decided("after-forbid", timeout=60)
    assert after["status"]["phase"] == "Succeeded", after["status"].get("message")


def test_a_pod_that_is_never_created_fails_fast(cluster: Cluster) -> None:
    why = 'pods "nopod-g1-x7k2p" is forbidden: violates PodSecurity "restricted:latest": seccompProfile'
    cluster.kubelet.faults["nopod"] = Fault(pod_create_error=why)  # type: ignore[union-attr]
    cluster.apply("nopod", SPEC)
    obj = cluster.wait_decided("nopod", timeout=30)
    assert obj["status"]["phase"] == "Failed"
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "InfraFailed"
    assert decided["message"].startswith("PodCreateFailed: Job nopod-g1 created no pod"), decided["message"]
    assert "violates PodSecurity" in decided["message"]
    assert condition(obj, "Completed")["reason"] == "PodCreateFailed"  # type: ignore[index]
    # The operator gave up on the Job, which Kubernetes would keep retrying: it deletes it.
    cluster.wait_for(lambda: not cluster.get("batch/v1", "jobs", "default", "nopod-g1"), 15, "the Job to be deleted")


def test_a_spec_the_policy_refuses_never_gets_a_job(cluster: Cluster) -> None:
    cluster.apply("policy", {**SPEC, "image": "docker.io/evil/miner:1"})
    obj = cluster.wait_decided("policy", timeout=30)
    assert obj["status"]["phase"] == "Failed"
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "InvalidSpec"
    assert decided["message"].startswith("policy.imageRegistries: spec.image 'docker.io/evil/miner:1' is not from an "
                                         "allowed registry (ghcr.io/spx-dev/)"), decided["message"]
    assert condition(obj, "Scheduled")["reason"] == "PolicyViolation"  # type: ignore[index]
    cluster.wait_for(lambda: [e for e in cluster.events("policy") if e["reason"] == "PolicyViolation"
                              and e["type"] == "Warning"], 10, "a PolicyViolation event")
    assert cluster.jobs_created("policy-") == []
    assert cluster.list("batch/v1", "jobs", "default", selector="bench.spx.dev/experiment=policy") == []


def test_reconciles_are_timed_and_the_work_queue_depth_is_exported(cluster: Cluster) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    cluster.apply("timed", SPEC)
    cluster.wait_decided("timed", timeout=60)
    samples = [s for fam in text_string_to_metric_families(cluster.metrics_text()) for s in fam.samples]  # one scrape

    def by_outcome(name: str) -> dict[str, float]:
        return {s.labels["outcome"]: s.value for s in samples if s.name == name and s.labels["handler"] == "experiment"}

    timed, counted = by_outcome("spx_reconcile_duration_seconds_count"), by_outcome("spx_reconcile_total")
    assert counted and set(counted) <= set(timed), (timed, counted)
    for outcome, n in counted.items():  # (a scrape may fall between the count and the observation)
        assert n - 1 <= timed[outcome] <= n, (outcome, timed, counted)
    (depth,) = [s.value for s in samples if s.name == "spx_workqueue_depth"]
    assert depth >= 0
