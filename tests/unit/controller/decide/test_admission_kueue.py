"""With Kueue (``spec.scheduling.queueName``) the operator's own concurrency queue steps aside
(spx.controller.decide.admission): a Kueue experiment never waits for the operator's slot, and its Job,
suspended or admitted by Kueue, never holds one. Table-tested on a real Store of objects shaped as the
API server returns them (the real control plane: tests/integration/test_operator_kueue.py)."""

from __future__ import annotations

from typing import Any

import pytest

from spx.controller.decide import admission
from spx.controller.decide.store import Store
from spx.controller.manifests.naming import KUEUE_QUEUE_LABEL, LABEL_GENERATION


def experiment(name: str, queue: str | None, created: str, running: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"scheduling": {"queueName": queue}} if queue else {}
    status = {"phase": "Running", "jobName": f"{name}-g1"} if running else {}
    return {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
            "metadata": {"name": name, "namespace": "ml", "uid": f"{name}-uid", "generation": 1,
                         "resourceVersion": "1", "creationTimestamp": created}, "spec": spec, "status": status}


def job(name: str, queue: str | None, suspend: bool) -> dict[str, Any]:
    labels = {LABEL_GENERATION: "1", **({KUEUE_QUEUE_LABEL: queue} if queue else {})}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-g1", "namespace": "ml", "uid": f"{name}-job", "resourceVersion": "2",
                         "labels": labels, "ownerReferences": [{"kind": "ShardedProjectionExperiment",
                                                                "uid": f"{name}-uid"}]},
            "spec": {"suspend": suspend}, "status": {}}


#: (id, Kueue experiment's Job: None (no Job yet) / suspended / admitted, active keys, waiting keys)
CASES = [
    ("no-job-yet", None, {("ml", "plain")}, []),
    ("suspended", True, {("ml", "plain")}, []),
    ("admitted-by-kueue", False, {("ml", "plain")}, []),
]


@pytest.mark.parametrize(("case", "suspend", "active", "waiting"), CASES, ids=[c[0] for c in CASES])
def test_kueue_experiments_neither_wait_for_nor_hold_a_slot(case: str, suspend: bool | None,
                                                             active: set[tuple[str, str]], waiting: list) -> None:
    store = Store()
    store.put_experiment(experiment("plain", None, "2026-12-06T00:00:00Z", running=True))
    store.put_job(job("plain", None, False))  # the operator's run, holding its one slot
    store.put_experiment(experiment("kq", "gpu-queue", "2026-12-06T00:00:01Z"))
    if suspend is not None:
        store.put_job(job("kq", "gpu-queue", suspend))
    assert admission.active(store) == active
    assert admission.waiting(store) == waiting
    assert admission.kueue_managed(store.experiments[("ml", "kq")])
    assert not admission.kueue_managed(store.experiments[("ml", "plain")])


def test_a_plain_experiment_still_waits_for_the_operators_slot() -> None:
    store = Store()
    store.put_experiment(experiment("plain", None, "2026-12-06T00:00:00Z", running=True))
    store.put_job(job("plain", None, False))
    store.put_experiment(experiment("second", None, "2026-12-06T00:00:02Z"))
    assert admission.waiting(store) == [("ml", "second")]
    verdict = admission.admit(("ml", "second"), 1, admission.active(store), admission.waiting(store), True)
    assert not verdict.admitted and verdict.active == 1
