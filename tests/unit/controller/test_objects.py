"""The one metadata/ownership module, and the store's memory of deleted pods."""

from __future__ import annotations

from typing import Any

import pytest

from spx.controller import objects as obj
from spx.controller.store import GONE_PER_JOB, Store

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
