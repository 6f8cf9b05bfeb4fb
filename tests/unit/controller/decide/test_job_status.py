"""spx.controller.decide.job_status: what a Job's own conditions and counters say, its pods aside."""

from __future__ import annotations

from typing import Any

import pytest

from spx.controller.decide.job_status import job_condition_message, job_ending, job_finished, job_had_pods


def job(*conditions: tuple[str, str], **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "e-g1"},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions], **status}}


@pytest.mark.parametrize(("conditions", "finished", "ending"), [
    ((), False, False),
    ((("Suspended", "True"),), False, False),
    ((("Complete", "True"),), True, False),
    ((("Failed", "True"),), True, False),
    ((("Failed", "False"),), False, False),
    ((("FailureTarget", "True"),), False, True),
    ((("SuccessCriteriaMet", "True"),), False, True),
    ((("SuccessCriteriaMet", "True"), ("Complete", "True")), True, True),
])
def test_finished_and_ending(conditions: tuple[tuple[str, str], ...], finished: bool, ending: bool) -> None:
    assert (job_finished(job(*conditions)), job_ending(job(*conditions))) == (finished, ending)


def test_the_latest_condition_message_skips_suspended() -> None:
    j = {"status": {"conditions": [
        {"type": "Suspended", "status": "False", "message": "resumed", "lastTransitionTime": "2026-01-01T00:09:00Z"},
        {"type": "FailureTarget", "status": "False", "reason": "Quota", "message": "refused",
         "lastTransitionTime": "2026-01-01T00:05:00Z"},
        {"type": "Complete", "status": "False", "message": "older", "lastTransitionTime": "2026-01-01T00:01:00Z"},
    ]}}
    assert job_condition_message(j) == "Quota: refused"
    assert job_condition_message(job(("Complete", "False"))) is None


@pytest.mark.parametrize(("status", "had"), [
    ({}, False),
    ({"active": 0, "failed": 0}, False),
    ({"active": 1}, True),
    ({"failed": 1}, True),
    ({"terminating": 1}, True),
    ({"uncountedTerminatedPods": {"failed": ["uid-1"]}}, True),
    ({"uncountedTerminatedPods": {}}, False),
])
def test_the_jobs_counters_tell_whether_it_ever_had_a_pod(status: dict[str, Any], had: bool) -> None:
    assert job_had_pods(job(**status)) is had
