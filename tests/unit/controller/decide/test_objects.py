"""The one metadata/ownership module, and the store's memory of deleted pods."""

from __future__ import annotations

from typing import Any

import pytest

from spx.controller.decide import objects as obj
from spx.controller.decide.store import GONE_PER_JOB, Store

JOB = {"metadata": {"name": "ds-g1", "namespace": "ml", "uid": "job-uid",
                    "ownerReferences": [{"kind": "ShardedProjectionExperiment", "uid": "exp-uid", "controller": True}]}}


def pod(name: str, labels: dict[str, str] | None = None, owner: str | None = None, created: str = "2026-01-01T00:00:00Z",
        **status: Any) -> dict[str, Any]:
    refs = [{"kind": "Job", "uid": owner, "controller": True}] if owner else []
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"{name}-uid", "labels": labels or {},
                         "ownerReferences": refs, "creationTimestamp": created, "resourceVersion": "1"},
            "status": status}


@pytest.mark.parametrize(("the_pod", "mine"), [
    (pod("a", owner="job-uid"), True),
    (pod("b", labels={"batch.kubernetes.io/job-name": "ds-g1"}), True),  # the label since Kubernetes 1.27
    (pod("c", labels={"job-name": "ds-g1"}), True),  # its older spelling
    (pod("d", labels={"batch.kubernetes.io/job-name": "ds-g1"}, owner="other-uid"), False),  # a previous incarnation's
    (pod("e", labels={"job-name": "ds-g2"}), False),
    (pod("f"), False),
])
def test_pod_of_job(the_pod: dict[str, Any], mine: bool) -> None:
    assert obj.pod_of_job(the_pod, JOB) is mine


def test_pods_of_job_oldest_first() -> None:
    later = pod("z", owner="job-uid", created="2026-01-01T00:01:00Z")
    earlier = pod("y", owner="job-uid", created="2026-01-01T00:00:30Z")
    assert [obj.name(p) for p in obj.pods_of_job(JOB, [later, pod("x"), earlier])] == ["y", "z"]


def test_accessors_of_an_object_without_metadata() -> None:
    assert (obj.name({}), obj.uid({}), obj.generation({}), obj.deleting({}), obj.owner_uid({}, "Job")) == ("", "", 1, False, None)


def test_the_store_remembers_the_last_state_of_deleted_pods_while_their_job_is_there() -> None:
    store = Store()
    store.put_job({**JOB, "metadata": {**JOB["metadata"], "resourceVersion": "1"}})
    evicted = pod("p", owner="job-uid", phase="Failed", conditions=[{"type": "DisruptionTarget", "status": "True"}])
    store.put_pod(evicted)
    store.put_pod(evicted, deleted=True)
    assert store.pods_of("job-uid") == [] and store.gone_pods_of("job-uid") == [evicted]
    for i in range(GONE_PER_JOB + 5):
        store.put_pod(pod(f"q{i}", owner="job-uid"), deleted=True)
    assert len(store.gone_pods_of("job-uid")) == GONE_PER_JOB
    store.put_job(JOB, deleted=True)
    assert store.gone_pods_of("job-uid") == []
    store.put_pod(pod("orphan", owner="job-uid"), deleted=True)  # its Job is gone: nothing to remember it for
    assert store.gone_pods_of("job-uid") == []


def test_the_store_remembers_when_a_pods_deletion_was_first_asked_for() -> None:
    """``kubectl delete pod`` (grace 30 s) at 00:01:00 while the bench runs; it ends at 00:01:02; the
    kubelet's final delete (grace 0) moves ``deletionTimestamp`` to 00:01:03. The last state the store
    keeps still says the deletion was asked for at 00:01:00 — before the container ended."""
    from spx.controller.decide.pod_outcome import deleted_while_running

    s = Store()
    s.put_job(dict(JOB))
    running = pod("p", owner="job-uid", phase="Running")
    s.put_pod(running)
    asked = {**running, "metadata": {**running["metadata"], "resourceVersion": "2",
                                     "deletionTimestamp": "2026-01-01T00:01:30Z", "deletionGracePeriodSeconds": 30}}
    s.put_pod(asked)
    term = {"exitCode": 1, "reason": "Error", "finishedAt": "2026-01-01T00:01:02Z"}
    final = {"metadata": {**asked["metadata"], "resourceVersion": "3", "deletionTimestamp": "2026-01-01T00:01:03Z",
                          "deletionGracePeriodSeconds": 0},
             "status": {"phase": "Failed", "containerStatuses": [{"name": "bench", "state": {"terminated": term}}]}}
    assert not deleted_while_running(final, term)  # the last state alone: asked for after the end
    s.put_pod(final)
    s.put_pod(final, deleted=True)
    (gone,) = s.gone_pods_of("job-uid")
    assert obj.deletion_asked(gone) == obj.deletion_asked(asked) and deleted_while_running(gone, term)
    # a pod deleted only after it had ended stays a pod that ended on its own
    ended = pod("q", owner="job-uid", phase="Failed")
    s.put_pod(ended)
    later = {**ended, "metadata": {**ended["metadata"], "resourceVersion": "2", "deletionTimestamp": "2026-01-01T00:09:00Z",
                                   "deletionGracePeriodSeconds": 0}}
    s.put_pod(later, deleted=True)
    assert not deleted_while_running(s.gone["job-uid"]["q-uid"], term)
