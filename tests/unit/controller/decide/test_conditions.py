"""Status computation: conditions and their transition times, result reading."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spx.api import ExperimentStatus, ResultSummary
from spx.api.status import Condition, Environment, KernelPoint
from spx.controller import metrics
from spx.controller.decide import conditions as cond
from spx.controller.decide.results import collect, read_summary

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"


# Conditions -------------------------------------------------------------------------------------------------


def test_last_transition_time_changes_only_when_status_changes() -> None:
    c = cond.set_condition([], "Decided", "False", "Running", "waiting", T0, 1)
    c = cond.set_condition(c, "Decided", "False", "Analyzing", "reading", T1, 1)
    assert c[0].last_transition_time == T0 and c[0].reason == "Analyzing"
    c = cond.set_condition(c, "Decided", "True", "Pass", "ok", T1, 1)
    assert c[0].last_transition_time == T1 and c[0].status == "True"


def test_conditions_keep_canonical_order() -> None:
    c: list[Condition] = []
    for t in ("Decided", "Other", "Scheduled", "Completed"):
        c = cond.set_condition(c, t, "False", "X", "", T0, 1)
    assert [x.type for x in c] == ["Scheduled", "Completed", "Decided", "Other"]


def _run_through(steps: list[tuple[cond.Transition, str]]) -> ExperimentStatus:
    status = cond.new_run(ExperimentStatus(), 1, T0)
    for transition, now in steps:
        status = cond.apply_transition(status, transition, now, 1)
    return status


@pytest.mark.parametrize(("final", "phase", "reason"), [
    (cond.decided("Pass", ["fine"], "JobSucceeded", "done"), "Succeeded", "Pass"),
    (cond.decided("Fail", ["slow"], "JobSucceeded", "done"), "Succeeded", "Fail"),
    (cond.decided("Inconclusive", ["spread"], "JobSucceeded", "done"), "Succeeded", "Inconclusive"),
    (cond.failed("BenchmarkFailed", "exit 1", "JobFailed"), "Failed", "BenchmarkFailed"),
    (cond.failed("InfraFailed", "evicted 4 times", "Evicted"), "Failed", "InfraFailed"),
    (cond.invalid_spec(["spec.sweep.tokens: must be increasing"]), "Failed", "InvalidSpec"),
])
def test_every_terminal_outcome_sets_decided_true(final: cond.Transition, phase: str, reason: str) -> None:
    status = _run_through([(cond.job_pending("j"), T0), (cond.running("j", "n1", True), T0), (final, T1)])
    decided = cond.get_condition(status.conditions, "Decided")
    assert status.phase == phase
    assert decided is not None and decided.status == "True" and decided.reason == reason
    assert decided.last_transition_time == T1
    assert cond.is_terminal(status) and cond.decided_reason(status) == reason


def test_a_new_generation_resets_results_but_keeps_transition_history() -> None:
    done = _run_through([(cond.running("j", "n1", True), T0), (cond.decided("Pass", [], "JobSucceeded", ""), T0)])
    done = cond.with_kernel(done, None, "Pass", ["r"]).model_copy(update={"job_name": "x-g1", "observed_generation": 1})
    fresh = cond.new_run(done, 2, T1)
    assert fresh.verdict is None and fresh.job_name is None and fresh.observed_generation == 2 and fresh.phase == "Pending"
    again = cond.apply_transition(fresh, cond.job_pending("x-g2"), T1, 2)
    decided = cond.get_condition(again.conditions, "Decided")
    assert decided is not None and decided.status == "False" and decided.last_transition_time == T1
    assert decided.observed_generation == 2


def test_queued_and_suspended_are_not_scheduled() -> None:
    q = _run_through([(cond.queued(2, 2), T0)])
    assert q.phase == "Queued" and "2 of 2" in (q.message or "")
    assert cond.get_condition(q.conditions, "Scheduled").reason == "Queued"  # type: ignore[union-attr]
    s = _run_through([(cond.suspended("j", "gpu"), T0)])
    assert s.phase == "Queued" and cond.get_condition(s.conditions, "Scheduled").reason == "Suspended"  # type: ignore[union-attr]


def test_status_round_trips_through_the_wire() -> None:
    status = _run_through([(cond.running("j", "n1", True), T0)])
    assert ExperimentStatus.model_validate(json.loads(json.dumps(status.to_wire()))) == status


# Result reading ------------------------------------------------------------------------------------------------


def summary(**kw: Any) -> str:
    s = ResultSummary(points=[KernelPoint(tokens=8, rows_per_rank=4, replicated_us=10, split_us=8, speedup=1.25)],
                      environment=Environment(gpu="NVIDIA H200"), world_size=8, gemm_backend="torch-fp8",
                      gather_source="measured", timer="cupti", **kw)
    return s.model_dump_json(by_alias=True, exclude_none=True)


@pytest.mark.parametrize(("message", "problem"), [
    (None, "empty"),
    ("", "empty"),
    ("Traceback (most recent call last):", "not JSON"),
    ('{"schemaVersion": "spx.dev/kernel-summary/v9"}', "schemaVersion"),
    ('{"schemaVersion": "spx.dev/kernel-summary/v1", "worldSize": 0}', "invalid summary"),
    ("[1, 2]", "expected a JSON object"),
    (summary()[:-10], "not JSON"),
])
def test_bad_summaries_say_what_is_wrong(message: str | None, problem: str) -> None:
    parsed, why = read_summary(message)
    assert parsed is None and why is not None and problem in why


def test_good_summary() -> None:
    parsed, why = read_summary(summary())
    assert why is None and parsed is not None and parsed.points[0].speedup == 1.25


def test_collect_prefers_the_log_and_keeps_partial_points() -> None:
    point = {"tokens": 8, "paddedTokens": 8, "rowsPerRank": 1,
             "replicated": {"medianUs": 2, "q1Us": 1, "q3Us": 3, "iqrPct": 100},
             "split": {"medianUs": 1, "q1Us": 1, "q3Us": 1, "iqrPct": 0}, "gatherSource": "measured", "maxAbsError": 0}
    log = "starting\n" + json.dumps({"kind": "point", "point": point}) + "\nKilled\n"
    got = collect(summary(complete=False, error="rank 1 died"), log)
    assert got.result is None and got.summary is not None and len(got.partial_points) == 1
    assert any("no {" in p for p in got.problems)
    nothing = collect(None, None)
    assert not nothing.usable and len(nothing.problems) == 2


# Configuration --------------------------------------------------------------------------------------------------


# Metrics ----------------------------------------------------------------------------------------------------------


def _samples(name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for fam in metrics.REGISTRY.collect() for s in fam.samples if s.name == name]


def test_metrics_follow_status_and_are_removed_with_the_experiment() -> None:
    metrics.reset()
    status = {
        "phase": "Succeeded", "verdict": "Fail",
        "environment": {"gpu": "NVIDIA H200", "vllm": "0.33.0"},
        "kernel": {"crossoverTokens": 3000.0, "recommendedThresholdTokens": 4096,
                   "points": [{"tokens": 2048, "rowsPerRank": 256, "replicatedUs": 30.0, "splitUs": 33.0, "speedup": 0.91}]},
    }
    metrics.observe_experiment("ns", "exp", status)
    verdicts = {lb["verdict"]: v for lb, v in _samples("spx_verdict") if lb["experiment"] == "exp"}
    assert verdicts == {"Pass": 0.0, "Fail": 1.0, "Inconclusive": 0.0}
    assert ({"namespace": "ns", "experiment": "exp", "candidate": "split", "tokens": "2048", "gpu": "NVIDIA H200"}, 33.0e-6) in _samples(
        "spx_kernel_latency_seconds")
    assert dict((lb["phase"], v) for lb, v in _samples("spx_experiments"))["Succeeded"] == 1
    # A new run on another GPU: the old GPU's series go.
    metrics.observe_experiment("ns", "exp", {"phase": "Running", "environment": {"gpu": "NVIDIA H100"}})
    assert not [lb for lb, _ in _samples("spx_kernel_latency_seconds") if lb["experiment"] == "exp"]
    assert dict((lb["phase"], v) for lb, v in _samples("spx_experiments"))["Running"] == 1
    metrics.forget_experiment("ns", "exp")
    assert not [lb for fam in metrics.REGISTRY.collect() for s in fam.samples for lb in [s.labels] if lb.get("experiment") == "exp"]
    assert all(v == 0 for _, v in _samples("spx_experiments"))


# Reconciler plumbing: the work queue and the store ---------------------------------------------------------


def test_work_queue_dedupes_prioritises_and_never_runs_a_key_twice_at_once() -> None:
    import asyncio

    from spx.controller.workqueue import WorkQueue

    async def scenario() -> list[tuple[str, str]]:
        q = WorkQueue(hold_s=0)  # (holding follow-up work back: tests/unit/controller/test_workqueue_hold.py)
        q.add(("ns", "old"))
        q.add(("ns", "old"))  # deduplicated
        q.add(("ns", "new"), urgent=True)
        first = await q.get()
        second = await q.get()
        assert len(q) == 0
        q.add(first)  # while being processed: remembered, re-queued when done
        assert len(q) == 0
        q.done(first)
        third = await q.get()
        q.done(second)
        q.done(third)
        return [first, second, third]

    assert asyncio.run(scenario()) == [("ns", "new"), ("ns", "old"), ("ns", "new")]


def test_store_ignores_stale_versions_and_other_incarnations() -> None:
    from spx.controller.decide.store import Store

    def exp(uid: str, rv: str) -> dict[str, Any]:
        return {"metadata": {"namespace": "ns", "name": "e", "uid": uid, "resourceVersion": rv}}

    store = Store()
    assert store.put_experiment(exp("a", "5"))
    assert not store.put_experiment(exp("a", "4"))  # an older watch event after our own write
    assert store.experiments[("ns", "e")]["metadata"]["resourceVersion"] == "5"
    assert not store.put_experiment(exp("old", "3"), deleted=True)  # deletion of a previous incarnation
    assert ("ns", "e") in store.experiments
    job = {"metadata": {"namespace": "ns", "name": "e-g1", "uid": "j", "resourceVersion": "6",
                        "ownerReferences": [{"kind": "ShardedProjectionExperiment", "uid": "a", "controller": True}]}}
    pod = {"metadata": {"namespace": "ns", "name": "e-g1-x", "uid": "p", "resourceVersion": "7",
                        "ownerReferences": [{"kind": "Job", "uid": "j", "controller": True}]}}
    store.put_job(job)
    store.put_pod(pod)
    assert store.experiment_of_pod(pod) == ("ns", "e") and store.jobs_of("a") == [job] and store.pods_of("j") == [pod]
