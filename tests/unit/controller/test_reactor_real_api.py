"""The reactor against a real kube-apiserver: what only the real server can tell.

Runs against the test suite's session control plane (``control_plane`` in ``tests/conftest.py``:
etcd + kube-apiserver + kube-controller-manager from ``KUBEBUILDER_ASSETS``, which ``.ci/run`` sets),
so CI runs it; without the binaries it is skipped with the fixture's message on how to get them.
``SPX_TEST_KUBECONFIG`` instead names the kubeconfig of another disposable control plane (never a
cluster you care about: the tests install the CRD and create a namespace)::

    KUBEBUILDER_ASSETS=$(setup-envtest use -p path 1.36) pytest tests/unit/controller/test_reactor_real_api.py
    SPX_TEST_KUBECONFIG=/path/to/kubeconfig pytest tests/unit/controller/test_reactor_real_api.py

Checked here: a status merge patch carrying a stale ``resourceVersion`` is answered 409 (the write's
optimistic lock), a status the CRD's schema refuses 422 (terminal, with the server's message); the
CRD with its map-list conditions is accepted; FM1 end to end with ``kubectl wait
--for=condition=Decided`` and kstatus' ``Stalled``; FM8 (no child after the owner is gone).
"""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest

from spx.api.crd import build_crd
from spx.api.spec import API_VERSION, KIND, PLURAL
from spx.api.status import ExperimentStatus
from spx.controller.kube import ApiError, KubeClient, resource_path
from spx.controller.reactor import Reactor
from spx.controller.settings import load_settings
from spx.controller.writes import Conflict, Rejected, Writes

EXTERNAL_KUBECONFIG = os.environ.get("SPX_TEST_KUBECONFIG")
KUBECTL: str | None = None  # the session control plane's kubectl, when the tests run against it
#: The kubeconfig the tests log in with: set once by the ``kubeconfig`` fixture.
KUBECONFIG: Path | None = None
SPEC = {"kernel": {"device": "cpu", "timer": "host", "gather": "gloo", "samples": 5, "cudaGraphs": False,
                   "l2Flush": False}, "parallelism": {"tensorParallelSize": 2}, "sweep": {"tokens": [8, 128]}}


def kubectl() -> str:
    if KUBECTL:
        return KUBECTL
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    found = (Path(assets) / "kubectl") if assets and (Path(assets) / "kubectl").exists() else shutil.which("kubectl")
    if not found:
        pytest.skip("no kubectl in KUBEBUILDER_ASSETS or on PATH")
    return str(found)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def client() -> KubeClient:
    before = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(KUBECONFIG)  # kopf's kubeconfig login reads it; put back after
    try:
        info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    finally:
        if before is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = before
    assert info is not None
    c = KubeClient(20.0)
    c.set_credentials(info)
    return c


@pytest.fixture(scope="module")
def kubeconfig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``SPX_TEST_KUBECONFIG`` when set, else an admin kubeconfig of the session's control plane."""
    global KUBECONFIG, KUBECTL
    if EXTERNAL_KUBECONFIG:
        KUBECONFIG = Path(EXTERNAL_KUBECONFIG)
    else:
        cp = request.getfixturevalue("control_plane")  # skips, saying how to get the binaries, without them
        KUBECONFIG = cp.write_kubeconfig(tmp_path_factory.mktemp("reactor-real-api") / "kubeconfig")
        KUBECTL = cp.kubectl()
    return KUBECONFIG


@pytest.fixture(scope="module")
def namespace(kubeconfig: Path) -> Iterator[str]:
    ns = f"spx-ctrl-{uuid.uuid4().hex[:6]}"

    async def setup() -> None:
        c = await client()
        crd = build_crd()
        if EXTERNAL_KUBECONFIG:  # the session fixture installed the CRD from crds/ already
            try:
                await c.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            except ApiError as err:
                if err.code != 409:
                    raise
                path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
                current = await c.get(path)
                await c.request("PUT", path, body={**crd, "metadata": {
                    **crd["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}})
        await c.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for _ in range(100):  # Established within a few seconds
            got = await c.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}")
            if any(x["type"] == "Established" and x["status"] == "True" for x in (got.get("status") or {}).get("conditions") or []):
                break
            await asyncio.sleep(0.1)
        await c.close()

    run(setup())
    yield ns

    async def teardown() -> None:
        c = await client()
        await c.delete(f"/api/v1/namespaces/{ns}")
        await c.close()

    run(teardown())


async def create_experiment(c: KubeClient, ns: str, name: str) -> dict[str, Any]:
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": ns}, "spec": SPEC}
    return await c.create(resource_path(API_VERSION, PLURAL, ns), body)


def test_status_writes_meet_the_real_optimistic_lock_and_schema(namespace: str) -> None:
    async def scenario() -> tuple[str, str]:
        c = await client()
        exp = await create_experiment(c, namespace, "locks")
        w = Writes(c, lambda: "2026-01-01T00:00:00Z")
        await w.status(exp, ExperimentStatus(phase="Queued", message="first"))
        with pytest.raises(Conflict) as conflict:  # computed from the old resourceVersion
            await w.status(exp, ExperimentStatus(phase="Running", message="stale"))
        fresh = await w.experiment(namespace, "locks")
        assert fresh is not None
        bad = ExperimentStatus.model_construct(phase="Exploded")  # not in the CRD's enum
        with pytest.raises(Rejected) as rejected:
            await w.status(fresh, bad)
        await c.close()
        return conflict.value.args[0], rejected.value.message

    conflict, rejected = run(scenario())
    assert "modified" in conflict
    assert "phase" in rejected and "Exploded" in rejected


def test_fm1_a_job_deleted_behind_the_watch_is_decided_and_kubectl_wait_returns(namespace: str) -> None:
    async def scenario() -> list[str]:
        c = await client()
        await create_experiment(c, namespace, "fm1")
        r = Reactor(settings=load_settings({}, metrics_port=0, progress_log_interval_s=0,
                                           watch_namespaces=(namespace,)), client=c)
        await r.resync()
        first = await r.reconcile((namespace, "fm1"))  # creates the real Job
        await c.delete(resource_path("batch/v1", "jobs", namespace, "fm1-g1"), propagation="Background")
        for _ in range(100):
            try:
                await c.get(resource_path("batch/v1", "jobs", namespace, "fm1-g1"))
            except ApiError as err:
                if err.not_found:
                    break
            await asyncio.sleep(0.1)
        stale = await r.reconcile((namespace, "fm1"))
        await r.resync()
        final = await r.reconcile((namespace, "fm1"))
        await r.stop()
        return [first, stale, final]

    # (admission only creates the Job; the status naming it is written by the next reconcile, from the store)
    assert run(scenario()) == ["job-created", "pending", "job-vanished"]
    env = {**os.environ, "KUBECONFIG": str(KUBECONFIG)}
    obj = f"{PLURAL}/fm1"
    for condition in ("Decided", "Stalled"):
        done = subprocess.run([kubectl(), "-n", namespace, "wait", f"--for=condition={condition}", obj, "--timeout=20s"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
    reason = subprocess.run([kubectl(), "-n", namespace, "get", obj, "-o",
                             "jsonpath={.status.conditions[?(@.type==\"Decided\")].reason}"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert reason.stdout == "InfraFailed"


def test_fm8_no_result_configmap_after_the_owner_is_gone(namespace: str) -> None:
    async def scenario() -> tuple[str, list[str]]:
        c = await client()
        exp = await create_experiment(c, namespace, "fm8")
        w = Writes(c, lambda: "2026-01-01T00:00:00Z")
        exp = await w.status(exp, ExperimentStatus(phase="Analyzing", observed_generation=1, job_name="fm8-g1"))
        r = Reactor(settings=load_settings({}, metrics_port=0, progress_log_interval_s=0,
                                           watch_namespaces=(namespace,)), client=c)
        await r.resync()
        # The finished Job as the store last saw it (its pod already gone) …
        r.store.put_job({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": "fm8-g1", "namespace": namespace, "uid": "job-uid", "resourceVersion": "1",
            "labels": {"bench.spx.dev/generation": "1"},
            "ownerReferences": [{"kind": KIND, "uid": exp["metadata"]["uid"], "controller": True}]},
            "spec": {}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}})
        r.reads.listed.add("job-uid")
        await c.delete(resource_path(API_VERSION, PLURAL, namespace, "fm8"))  # … while it is being read
        outcome = await r.reconcile((namespace, "fm8"))
        cms = await c.get(resource_path("v1", "configmaps", namespace))
        await r.stop()
        return outcome, [cm["metadata"]["name"] for cm in cms.get("items", [])]

    outcome, configmaps = run(scenario())
    assert outcome == "deleted"
    assert not [n for n in configmaps if n.startswith("fm8")]


def test_a_result_configmap_of_a_log_full_of_broken_lines_is_accepted(namespace: str) -> None:
    """A bench that printed thousands of broken point lines (NaN from an old image's ``json.dumps``): one
    problem per line used to push ``problems.txt`` past the API server's 1 MiB ConfigMap limit — the write
    was refused (422) on every retry and the run never decided. The problems are bounded; the log comes
    first and the real API server accepts the ConfigMap."""
    from spx.controller.decide.results import collect
    from spx.controller.manifests.result_configmap import build_result_configmap

    pad = "x" * 100
    log = "".join(f'{{"kind": "point", "point": {{"tokens": {i}, "medianUs": NaN, "pad": "{pad}"}}}}\n'
                  for i in range(5000))
    problems = collect(None, log).problems
    assert len(problems) > 5000 and len("\n".join(problems).encode()) > 1_048_576  # alone over the limit

    async def scenario() -> dict[str, Any]:
        c = await client()
        exp = await create_experiment(c, namespace, "broken")  # the owner (else the garbage collector takes it)
        manifest = build_result_configmap("broken", namespace, exp["metadata"]["uid"], 1, log=log, problems=problems)
        w = Writes(c, lambda: "2026-01-01T00:00:00Z")
        await w.configmap(manifest)
        got = await c.get(resource_path("v1", "configmaps", namespace, manifest["metadata"]["name"]))
        await c.close()
        return got  # type: ignore[no-any-return]

    data = run(scenario())["data"]
    assert data["pod.log"] == log  # the whole log (≈ 600 KB) kept
    assert data["problems.txt"].startswith(problems[0]) and "more problem line(s) left out" in data["problems.txt"]


def test_fm5_the_job_controller_marks_a_preemption_as_a_new_suspension(namespace: str) -> None:
    """Kueue preempts by suspending an admitted Job again. The real Job controller then sets
    ``Suspended=True`` with a new ``lastTransitionTime``; the decision bounds the wait for re-admission
    from it (``suspended_since``), not from the Job's creation."""
    import dataclasses
    import datetime as dt

    from spx.api.loading import validate_spec
    from spx.controller.decide import conclusion as c
    from spx.controller.decide import decision as dec
    from spx.controller.decide.conditions import parse_time
    from spx.controller.decide.job_status import suspended_since

    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "preempted-g1", "namespace": namespace},
            "spec": {"suspend": True, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "bench", "image": "spx-bench:test"}]}}}}
    path = resource_path("batch/v1", "jobs", namespace, "preempted-g1")

    async def suspended(c: KubeClient, status: str) -> dict[str, Any]:
        for _ in range(300):
            job: dict[str, Any] = await c.get(path)
            if any(x["type"] == "Suspended" and x["status"] == status for x in job.get("status", {}).get("conditions", [])):
                return job
            await asyncio.sleep(0.1)
        raise AssertionError(f"no Suspended={status} from the Job controller")

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        c = await client()
        await c.create(resource_path("batch/v1", "jobs", namespace), body)
        first = await suspended(c, "True")  # created suspended: waiting for Kueue
        await c.merge_patch(path, {"spec": {"suspend": False}})  # admitted
        await suspended(c, "False")
        created = first["metadata"]["creationTimestamp"]
        for _ in range(300):  # the server's clock (1 s resolution) past the Job's creation
            probe = await c.create(resource_path("v1", "configmaps", namespace), {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "clock-"}})
            if probe["metadata"]["creationTimestamp"] > created:
                break
            await asyncio.sleep(0.1)
        await c.merge_patch(path, {"spec": {"suspend": True}})  # preempted
        again = await suspended(c, "True")
        await c.close()
        return first, again

    first, again = run(scenario())
    assert suspended_since(again) is not None and suspended_since(again) > again["metadata"]["creationTimestamp"]
    # the bound (60 s) counted from the preemption: still waiting 59.5 s after it, given up at 60 s
    spec = validate_spec({**SPEC, "scheduling": {"queueName": "gpus", "admissionTimeoutSeconds": 60}})
    at = parse_time(suspended_since(again))
    assert at is not None
    base = dec.Observed(name="preempted", namespace=namespace, uid="exp-uid", generation=1, spec=spec,
                      status=ExperimentStatus(phase="Running", observed_generation=1, job_name="preempted-g1"),
                      now=at + dt.timedelta(seconds=59.5), jobs=[again])
    assert c.conclude(base).outcome == "suspended"
    assert c.conclude(dataclasses.replace(base, now=at + dt.timedelta(seconds=60))).outcome == "not-admitted"


def test_a_followed_log_answered_404_is_reported_once_not_retried(namespace: str) -> None:
    """The log of a pod the API server does not have (deleted unseen, in a watch gap): the follower stops
    at the first 404 and reports it (``on_gone``) instead of re-opening the stream and giving up silently."""
    from spx.controller.logs import MAX_RECONNECTS, LogFollowers

    async def scenario() -> tuple[list[tuple[str, str, str]], bool, int]:
        c = await client()
        gone: list[tuple[str, str, str]] = []
        checks = 0

        def running(ns: str, pod: str, uid: str) -> bool:  # the store still says it runs
            nonlocal checks
            checks += 1
            return True

        logs = LogFollowers(c, 1 << 20, running, on_gone=lambda *args: gone.append(args))
        logs.follow(namespace, "vanished-pod", "uid-1", "job-uid-1", "vanished-g1")
        await asyncio.wait_for(logs._pods["uid-1"].done.wait(), timeout=30)
        followed = logs._pods["uid-1"]
        await logs.stop()
        await c.close()
        return gone, followed.gone, checks

    gone, marked, checks = run(scenario())
    assert gone == [(namespace, "vanished-pod", "uid-1")]
    assert marked and checks == 0 < MAX_RECONNECTS  # no re-open: the 404 is the answer
