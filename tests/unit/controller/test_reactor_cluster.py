"""The reactor carrying decisions out against an API server: the failure modes whose truth lives in
the API server, not in the decision step (FM1 a Job deleted behind a broken watch, FM4 admission
after a restart, FM8 the owner deleted while its result is read).

The reactor runs in-process without kopf (no watches: the tests play the watch, or its absence); the
API server is the real one of the session's control plane (``control_plane`` in tests/conftest.py),
in a namespace of this module, with no node agent: nothing runs the Jobs' pods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from spx.api.loading import validate_spec
from spx.controller.kube import KubeClient
from spx.controller.manifests.job import BenchOptions, build_job
from spx.controller.reactor import Reactor
from spx.controller.settings import load_settings
from spx_testing.cluster import EXP_API, EXP_PLURAL, Cluster
from spx_testing.controlplane import ControlPlane

SPEC = {"kernel": {"device": "cpu", "timer": "host", "gather": "gloo", "samples": 5, "cudaGraphs": False,
                   "l2Flush": False}, "parallelism": {"tensorParallelSize": 2}, "sweep": {"tokens": [8, 128]}}
NS = "reactor"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(control_plane, NS, tmp_path_factory.mktemp("reactor"), agent=False)  # nothing runs the Jobs
    yield c
    c.close()


def reactor(cluster: Cluster, **settings: Any) -> Reactor:
    client = KubeClient(10.0)
    cp = cluster.cp
    client.set_credentials(kopf.ConnectionInfo(server=cp.url, ca_path=str(cp.ca), scheme="Bearer", token=cp.token))
    settings.setdefault("watch_namespaces", (NS,))  # other modules' experiments share the session's server
    return Reactor(settings=load_settings({}, metrics_port=0, progress_log_interval_s=0, **settings), client=client)


def conditions(obj: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def job_of(cluster: Cluster, exp: dict[str, Any]) -> dict[str, Any]:
    m = exp["metadata"]
    manifest = build_job(m["name"], NS, m["uid"], 1, validate_spec(exp["spec"]), "img:1", BenchOptions())
    return cluster.api.create("batch/v1", "jobs", NS, manifest)


@pytest.mark.parametrize("namespaces", [(), (NS,)], ids=["cluster-wide", "namespaced"])
def test_fm1_a_job_deleted_behind_a_broken_watch_is_found_gone_by_the_resync(cluster: Cluster,
                                                                             namespaces: tuple[str, ...]) -> None:
    name = f"fm1-{len(namespaces)}"
    exp = cluster.apply(name, SPEC)
    job_of(cluster, exp)

    async def scenario() -> tuple[str, str, str]:
        r = reactor(cluster, watch_namespaces=namespaces)
        await r.resync()  # the store now holds the experiment and its Job
        first = await r.reconcile((NS, name))
        cluster.delete("batch/v1", "jobs", f"{name}-g1")  # … and the watch never says so (410, re-list)
        cluster.wait_for(lambda: cluster.get("batch/v1", "jobs", f"{name}-g1") is None, 60, "the Job to be gone")
        stale = await r.reconcile((NS, name))
        await r.resync()  # the periodic re-list asks the API server, not the cache
        final = await r.reconcile((NS, name))
        await r.stop()
        return first, stale, final

    first, stale, final = asyncio.run(scenario())
    assert (first, stale, final) == ("pending", "pending", "job-vanished")
    c = conditions(cluster.exp(name))
    assert c["Decided"] == ("True", "InfraFailed") and c["Completed"] == ("True", "JobDeleted")
    assert c["Stalled"] == ("True", "InfraFailed") and c["Reconciling"][0] == "False"


def test_fm4_after_a_restart_nothing_is_admitted_before_both_lists(cluster: Cluster) -> None:
    for name in ("fm4-a", "fm4-b"):
        cluster.apply(name, SPEC)
    running = cluster.apply("fm4-running", SPEC)
    job_of(cluster, running)  # a run the previous operator started: it holds the only slot

    async def scenario() -> list[str]:
        r = reactor(cluster, max_concurrent=1)
        for name in ("fm4-a", "fm4-b"):  # the experiment watch delivered these first; no Job listed yet
            r.on_experiment("ADDED", cluster.exp(name) or {})
        before = [await r.reconcile((NS, n)) for n in ("fm4-a", "fm4-b")]
        await r.resync()
        after = [await r.reconcile((NS, n)) for n in ("fm4-a", "fm4-b")]
        await r.stop()
        return before + after

    assert asyncio.run(scenario()) == ["waiting-for-sync", "waiting-for-sync", "queued", "queued"]
    assert [j["metadata"]["name"] for j in cluster.list("batch/v1", "jobs") if j["metadata"]["name"].startswith("fm4")] \
        == ["fm4-running-g1"]
    assert conditions(cluster.exp("fm4-a"))["Decided"] == ("False", "Queued")


def test_fm8_no_child_is_written_after_the_owner_is_gone(cluster: Cluster) -> None:
    exp = cluster.apply("fm8", SPEC)
    job_of(cluster, exp)
    # a finished Job as the real server accepts it (it refuses Complete without SuccessCriteriaMet, startTime
    # and completionTime); its pod never ran: nothing is left to read but the Job's own status
    started = cluster.wait_for(lambda: (cluster.get("batch/v1", "jobs", "fm8-g1") or {}).get("status", {}).get("startTime"),
                               60, "the Job controller to start the Job")  # fmt: skip
    cluster.patch("batch/v1", "jobs", "fm8-g1", {"status": {
        "startTime": started, "completionTime": started, "active": 0, "ready": 0, "succeeded": 1, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": started},
            {"type": "Complete", "status": "True", "lastTransitionTime": started}]}}, sub="status")  # fmt: skip
    cluster.patch(EXP_API, EXP_PLURAL, "fm8", {"status": {"phase": "Analyzing", "observedGeneration": 1,
                                                              "jobName": "fm8-g1"}}, sub="status")

    async def scenario() -> str:
        r = reactor(cluster)
        await r.resync()
        cluster.delete(EXP_API, EXP_PLURAL, "fm8")  # deleted while its result is being read
        outcome = await r.reconcile((NS, "fm8"))
        await r.stop()
        return outcome

    assert asyncio.run(scenario()) == "deleted"
    assert not [cm for cm in cluster.list("v1", "configmaps") if cm["metadata"]["name"].startswith("fm8")]
