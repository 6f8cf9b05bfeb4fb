"""The operator's last two fault paths (issue 29), each on the real control plane in a namespace of its own.

- An evicted pod's replacement is waited for with its own bound, above the Job controller's pod
  back-off (~10 s here), whatever ``SPX_IMAGE_PULL_TIMEOUT_SECONDS`` says: with a 3 s pull timeout an
  eviction used to end ``PodCreateFailed`` and the Job was deleted before its replacement existed.
- A Job and its pod deleted during a watch gap in a namespace where they were the only ones: the Job
  and pod watches come back through ``410 Gone`` and kopf's re-list of the (now empty) namespace
  delivers no object, so nothing used to trigger the operator's catch-up re-list; the experiment stayed
  ``Running`` until the periodic re-list (600 s) while the log follower got ``404`` and gave up
  silently. The follower's 404 is now an observation: the operator re-lists at once and decides.

The fault-injecting proxy (``faultproxy.py``) stands between the operator and the API server only for
the second test; the node agent, the Job controller and the test client talk to the server directly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from spx_testing.cluster import Cluster, condition
from spx_testing.controlplane import ControlPlane
from spx_testing.faultproxy import FaultProxy, Rule
from spx_testing.nodeagent import Fault
from spx_testing.specs import CPU_SPEC

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def short_pull(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """An operator whose image-pull limit (3 s) is far below the Job controller's pod back-off (10 s)."""
    c = Cluster(control_plane, "short-pull", tmp_path_factory.mktemp("operator-short-pull"))
    c.start_operator(env={"SPX_IMAGE_PULL_TIMEOUT_SECONDS": "3", "SPX_SCHEDULE_TIMEOUT_SECONDS": "3",
                          "SPX_MAX_DISRUPTIONS": "1", "SPX_BENCH_IMAGE": "spx-bench:test"})
    c.wait_operator_ready()
    yield c
    c.close()


def test_an_eviction_is_retried_whatever_the_pull_timeout(short_pull: Cluster) -> None:
    """The real Job controller replaces the evicted pod after its back-off (~10 s); the operator waits
    for it (SPX_REPLACEMENT_TIMEOUT_SECONDS, never below the back-off) and the run succeeds."""
    assert short_pull.agent is not None
    short_pull.agent.faults["evicted"] = Fault(evict=1, evict_after=0.5, replay=True, replay_seconds=1.5)
    short_pull.apply("evicted", CPU_SPEC)
    obj = short_pull.wait_decided("evicted", timeout=180)
    assert obj["status"]["phase"] == "Succeeded", obj["status"].get("message")
    created = [e for e in short_pull.events("evicted-g1") if e["reason"] == "SuccessfulCreate"]
    assert len(created) == 2, created  # the evicted pod and its replacement
    assert short_pull.jobs_created("evicted-") == ["evicted-g1"]


NS = "watch-gap"
JOBS_PATH = f"/apis/batch/v1/namespaces/{NS}/jobs"
PODS_PATH = f"/api/v1/namespaces/{NS}/pods"


@pytest.fixture
def gapped(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """An operator behind the fault proxy, alone in its namespace."""
    c = Cluster(control_plane, NS, tmp_path_factory.mktemp("operator-watch-gap"))
    proxy = FaultProxy(control_plane.url, control_plane.ca)
    c.call(proxy.start)
    c.proxy = proxy  # type: ignore[attr-defined]
    kubeconfig = control_plane.write_kubeconfig(c.workdir / "kubeconfig-proxy", server=proxy.url, namespace=NS)
    c.start_operator(env={"SPX_REQUEST_TIMEOUT": "5"}, kubeconfig=kubeconfig)
    c.wait_operator_ready()
    yield c
    c.stop_operator()
    c.call(proxy.stop)
    c.close()


def test_a_job_deleted_in_a_watch_gap_of_an_otherwise_empty_namespace_is_decided_in_seconds(gapped: Cluster) -> None:
    """The Job and pod watches are cut and answered ``410 Gone``; kopf's re-lists are held until the Job
    and its pod are gone, so they return nothing and deliver no object. The experiment watch goes on
    (its resource version is still valid). The log follower's stream of the deleted pod ends with a 404:
    the operator re-lists, confirms the Job gone and decides ``InfraFailed`` — within seconds, not at the
    periodic re-list (SPX_RESYNC_SECONDS, 600 s)."""
    assert gapped.agent is not None
    proxy: FaultProxy = gapped.proxy  # type: ignore[attr-defined]
    gapped.agent.faults["alone"] = Fault(replay=True, replay_seconds=300)
    gapped.apply("alone", CPU_SPEC)
    gapped.wait_for(lambda: (o := gapped.exp("alone")) and o.get("status", {}).get("phase") == "Running"
                    and any("log" in path and "alone-g1" in path for _, _, path, _ in proxy.log), 120,
                    "the run to be Running and its pod's log followed")
    lists = [gapped.call(lambda p=p: proxy.add(Rule("hold", path=p + "$", watch=False, times=1)))
             for p in (JOBS_PATH, PODS_PATH)]
    for p in (JOBS_PATH, PODS_PATH):
        gapped.call(lambda p=p: proxy.add(Rule("gone", path=p + "$", watch=True, times=1)))
    try:
        for p in (JOBS_PATH, PODS_PATH):  # end the Job and pod watches only: kopf re-opens them, gets 410
            gapped.call(lambda p=p: proxy.cut_matching(p + "$"))
        gapped.wait_for(lambda: all(r.hits for r in lists), 60, "kopf's re-lists of Jobs and pods (held)")
        gapped.delete("batch/v1", "jobs", "alone-g1")
        gapped.wait_for(lambda: gapped.get("batch/v1", "jobs", "alone-g1") is None
                        and not gapped.list("v1", "pods", "batch.kubernetes.io/job-name=alone-g1"), 120,
                        "the Job and its pod to be gone")
    finally:
        for r in lists:
            gapped.call(r.release)
    back = time.monotonic()
    obj = gapped.wait_decided("alone", timeout=120)
    took = time.monotonic() - back
    decided = condition(obj, "Decided")
    assert decided is not None and decided["reason"] == "InfraFailed" and "was deleted" in decided["message"], decided
    assert took < 60, f"decided {took:.1f}s after the watches came back"  # the target is seconds; the machine is shared
    print(f"Job deleted in a watch gap of an empty namespace: Decided {took:.1f}s after the re-lists returned")
