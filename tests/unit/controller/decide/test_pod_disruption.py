"""spx.controller.decide.pod_disruption: which pods the cluster took away, which lost their node, and how
long a pod being deleted is waited for."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from spx.controller.decide.pod_disruption import (
    TERMINATING_SLACK_S,
    grace_left_s,
    is_disrupted,
    is_node_lost,
    on_lost_node,
)

NOW = dt.datetime(2026, 1, 1, 0, 10, tzinfo=dt.UTC)


def pod(phase: str = "Running", *, reason: str | None = None, target: str | None = None, node: str = "n1",
        deleting: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if reason:
        status["reason"] = reason
    if target:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": target}]
    meta: dict[str, Any] = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = deleting
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


#: (id, pod, disrupted, node lost)
CASES: list[tuple[str, dict[str, Any], bool, bool]] = [
    ("running", pod(), False, False),
    ("bench-failed", pod("Failed", reason="Error"), False, False),
    ("evicted-by-api", pod("Failed", target="EvictionByEvictionAPI"), True, False),
    ("preempted-while-running", pod(target="PreemptionByScheduler"), True, False),
    ("kubelet-evicted", pod("Failed", reason="Evicted"), True, False),
    ("evicted-reason-but-running", pod(reason="Evicted"), False, False),
    ("taint-manager", pod(target="DeletionByTaintManager"), True, True),
    ("pod-gc", pod("Failed", target="DeletionByPodGC"), True, True),
    ("phase-unknown", pod("Unknown"), False, True),
    ("node-lost-reason", pod("Failed", reason="NodeLost"), True, True),
]


@pytest.mark.parametrize(("case", "p", "disrupted", "lost"), CASES, ids=[c[0] for c in CASES])
def test_disrupted_and_node_lost(case: str, p: dict[str, Any], disrupted: bool, lost: bool) -> None:
    assert (is_disrupted(p), is_node_lost(p)) == (disrupted, lost)


def test_a_node_not_ready_counts_as_lost_only_when_read() -> None:
    p = pod()
    assert not on_lost_node(p, None)
    assert not on_lost_node(p, {"n1": True})
    assert not on_lost_node(p, {"n1": None})  # readiness unknown
    assert on_lost_node(p, {"n1": False})
    assert on_lost_node(pod("Unknown"), None)


def test_a_pod_being_deleted_is_waited_for_its_grace_period_plus_the_slack() -> None:
    assert grace_left_s(pod(), NOW) is None  # not being deleted
    # deletionTimestamp = deletion time + grace period; 10 s ago: 20 s of the 30 s slack left
    assert grace_left_s(pod(deleting="2026-01-01T00:09:50Z"), NOW) == pytest.approx(TERMINATING_SLACK_S - 10)
    assert grace_left_s(pod(deleting="2026-01-01T00:09:00Z"), NOW) == pytest.approx(-30)
