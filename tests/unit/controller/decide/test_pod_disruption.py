"""spx.controller.decide.pod_disruption: which pods the cluster took away, which lost their node, and how
long a pod being deleted is waited for."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from spx.controller.decide.observation import Timeouts
from spx.controller.decide.pod_disruption import (
    JOB_POD_BACKOFF_MAX_S,
    JOB_POD_BACKOFF_S,
    REPLACEMENT_SLACK_S,
    TERMINATING_SLACK_S,
    awaiting_replacement,
    grace_left_s,
    is_disrupted,
    is_node_lost,
    on_lost_node,
    replacement_wait_s,
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


#: (id, replacement_timeout_s, image_pull_timeout_s, disruptions, the wait for the replacement)
REPLACEMENT_WAITS = [
    ("the setting when above the back-off", 300.0, 300.0, 1, 300.0),
    ("a short pull timeout plays no part (issue 29: 3 s ended an eviction PodCreateFailed)", 300.0, 3.0, 1, 300.0),
    ("a short setting is raised to the first back-off plus the slack", 3.0, 3.0, 1, JOB_POD_BACKOFF_S + REPLACEMENT_SLACK_S),
    ("the back-off doubles per disruption", 3.0, 3.0, 3, 4 * JOB_POD_BACKOFF_S + REPLACEMENT_SLACK_S),
    ("the back-off is capped", 3.0, 3.0, 20, JOB_POD_BACKOFF_MAX_S + REPLACEMENT_SLACK_S),
    ("no disruption counted yet: the first back-off", 1.0, 1.0, 0, JOB_POD_BACKOFF_S + REPLACEMENT_SLACK_S),
]


@pytest.mark.parametrize(("case", "replacement", "pull", "disruptions", "wait"), REPLACEMENT_WAITS,
                         ids=[r[0] for r in REPLACEMENT_WAITS])
def test_the_wait_for_a_replacement_is_its_own_bound_above_the_job_controllers_back_off(
        case: str, replacement: float, pull: float, disruptions: int, wait: float) -> None:
    t = Timeouts(image_pull_timeout_s=pull, replacement_timeout_s=replacement)
    assert replacement_wait_s(t, disruptions) == pytest.approx(wait)
    assert replacement_wait_s(t, disruptions) > min(JOB_POD_BACKOFF_MAX_S, JOB_POD_BACKOFF_S * 2 ** max(0, disruptions - 1))


def evicted(at: str) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"},
            "status": {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True",
                                                          "reason": "EvictionByEvictionAPI", "lastTransitionTime": at}]}}


#: (id, seconds since the eviction, image_pull_timeout_s, replacement_timeout_s, state, reason)
AWAITING = [
    ("5 s after: replacing, with a 3 s pull timeout", 5, 3.0, 3.0, "transition", "Replacing"),
    ("the Job controller's 10 s back-off: still replacing", 12, 3.0, 3.0, "transition", "Replacing"),
    ("past the back-off and the slack", 31, 3.0, 3.0, "failed", "PodCreateFailed"),
    ("within the setting", 100, 3.0, 120.0, "transition", "Replacing"),
    ("past the setting", 121, 600.0, 120.0, "failed", "PodCreateFailed"),
]


@pytest.mark.parametrize(("case", "ago", "pull", "replacement", "state", "reason"), AWAITING, ids=[r[0] for r in AWAITING])
def test_awaiting_a_replacement(case: str, ago: int, pull: float, replacement: float, state: str, reason: str) -> None:
    at = (NOW - dt.timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    job = {"metadata": {"name": "e-g1"}}
    o = awaiting_replacement(job, "e-g1", evicted(at), NOW,
                             Timeouts(image_pull_timeout_s=pull, replacement_timeout_s=replacement), None, 1)
    assert (o.state, o.reason) == (state, reason), o.message
    if state == "transition":
        assert o.recheck_after_s is not None and ago + o.recheck_after_s == pytest.approx(
            replacement_wait_s(Timeouts(replacement_timeout_s=replacement), 1))
    else:
        assert o.abort and "SPX_REPLACEMENT_TIMEOUT_SECONDS" in o.message
