"""The decision step over the cross-product of its factors (the shape of kopf's
causation matrix tests of ``detect_changing_cause``): the stored phase × the Job's state × the pod's state
(live, or only remembered after its deletion) × whether the bench left a result × whether the
operator's time limits have passed.

Invariants checked on every one of the combinations, not on hand-picked rows:

- every combination reaches a decision that needs nothing more (no question loop);
- a finished Job (``Complete``/``Failed``) always ends decided, and so does a run past every limit
  whose pod is stuck where no one else will end it;
- no decision without a reason: ``Decided=True`` carries a known reason and a message, ``Completed``
  a reason, the phase is terminal and ``completionTime`` is set;
- a Job is never deleted while the Job controller is ending it (``FailureTarget``/``SuccessCriteriaMet``);
- the status never claims a bound pod (``Scheduled=True``) when no pod was ever bound.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pytest

from spx.api.conditions import DECIDED_REASONS
from spx.api.status import ExperimentStatus
from spx.controller.decide import conditions as cnd
from spx.controller.decide import decision as dec

from .world import JOB, T0, ApiServer, actions, bench_outputs, cond, drive, job, observed, pod, ts

LOG, SUMMARY = bench_outputs()

PHASES: dict[str, ExperimentStatus] = {
    "new": ExperimentStatus(),
    "Pending": ExperimentStatus(phase="Pending", observed_generation=1, job_name=JOB, start_time=ts(0)),
    "Running": ExperimentStatus(phase="Running", observed_generation=1, job_name=JOB, start_time=ts(0)),
    "Analyzing": ExperimentStatus(phase="Analyzing", observed_generation=1, job_name=JOB, start_time=ts(0)),
}
JOBS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "active": job(),
    "suspended": job(suspend=True),
    "FailureTarget(deadline)": job(cond("FailureTarget", reason="DeadlineExceeded")),
    "SuccessCriteriaMet": job(cond("SuccessCriteriaMet")),
    "Complete": job(cond("Complete")),
    "Failed(bench)": job(cond("Failed", reason="PodFailurePolicy")),
    "Failed(deadline)": job(cond("Failed", reason="DeadlineExceeded")),
}
UNSCHEDULABLE = cond("PodScheduled", "False", "Unschedulable", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu")
EVICTED = cond("DisruptionTarget", reason="EvictionByEvictionAPI", message="Eviction API: evicting", at=30)
#: (live pods, pods remembered after their deletion, was a pod ever bound)
PODS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], bool]] = {
    "none": ([], [], False),
    "unbound": ([pod("Pending", node=None)], [], False),
    "unschedulable": ([pod("Pending", node=None, conditions=(UNSCHEDULABLE,))], [], False),
    "unschedulable, deleted": ([], [pod("Pending", node=None, conditions=(UNSCHEDULABLE,))], False),
    "image pull": ([pod("Pending", waiting="ImagePullBackOff", conditions=(cond("PodScheduled"),))], [], True),
    "running": ([pod("Running", running=True)], [], True),
    "running, deleting": ([pod("Running", running=True, deleting=True)], [], True),
    "succeeded": ([pod("Succeeded", exit_code=0, message=SUMMARY)], [], True),
    "succeeded, deleted": ([], [pod("Succeeded", exit_code=0, message=SUMMARY)], True),
    "failed exit 1": ([pod("Failed", exit_code=1)], [], True),
    "killed in the grace period, deleted": ([], [pod("Failed", exit_code=143, message=SUMMARY, deleting=True)], True),
    "evicted, deleted": ([], [pod("Failed", exit_code=137, conditions=(EVICTED,), deleting=True)], True),
    "node lost": ([pod("Unknown", running=True)], [], True),
}
RESULTS = {"result": LOG, "no result": None}
#: "within": a few seconds after the Job started; "past": hours later, past every operator limit.
DEADLINE = {"within": T0 + dt.timedelta(seconds=40), "past": T0 + dt.timedelta(hours=5)}

FINISHED = {"Complete", "Failed(bench)", "Failed(deadline)"}
#: Pod states where nothing but the operator's own limit ends the wait (the Job controller does not).
STUCK = {"unschedulable", "image pull"}

COMBINATIONS = list(itertools.product(PHASES, JOBS, PODS, RESULTS, DEADLINE))


def _ids() -> list[str]:
    return [" | ".join(combo) for combo in COMBINATIONS]


@pytest.mark.parametrize(("phase", "job_state", "pod_state", "result", "deadline"), COMBINATIONS, ids=_ids())
def test_every_combination_decides_with_a_reason(phase: str, job_state: str, pod_state: str, result: str,
                                                 deadline: str) -> None:
    the_job = JOBS[job_state]
    live, gone, ever_bound = PODS[pod_state]
    o = observed(status=PHASES[phase], jobs=[the_job] if the_job is not None else [],
                 pods=live if the_job is not None else [], gone_pods=gone if the_job is not None else [],
                 now=DEADLINE[deadline])
    final, decisions = drive(o, ApiServer(log=RESULTS[result], message=None))
    assert decisions[-1].need is None
    status = final.status

    decided = cnd.get_condition(status.conditions, "Decided")
    if the_job is not None and job_state in FINISHED:
        assert decided is not None and decided.status == "True", (decisions[-1].outcome, status.message)
    if the_job is not None and deadline == "past" and pod_state in STUCK and job_state == "active":
        assert decided is not None and decided.status == "True", (decisions[-1].outcome, status.message)

    if decided is not None and decided.status == "True":  # no decision without a reason
        assert decided.reason in DECIDED_REASONS and decided.message
        completed = cnd.get_condition(status.conditions, "Completed")
        assert completed is not None and completed.status == "True" and completed.reason
        assert status.phase in cnd.TERMINAL_PHASES and status.completion_time and status.message

    if the_job is not None and job_state in ("FailureTarget(deadline)", "SuccessCriteriaMet"):
        assert not [a for a in actions(decisions) if isinstance(a, dec.DeleteJobs)]

    if not ever_bound and phase != "Running":
        scheduled = cnd.get_condition(status.conditions, "Scheduled")
        assert scheduled is None or scheduled.status != "True", (pod_state, scheduled)


def test_the_matrix_covers_every_factor() -> None:
    """The product is what it says: 4 phases × 8 Job states × 13 pod states × 2 × 2."""
    assert len(COMBINATIONS) == 4 * 8 * 13 * 2 * 2
