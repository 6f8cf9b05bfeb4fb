"""The decision step, table-tested (the shape of kopf's tests/causation/test_detection.py): each row is
one combination of factors — the Job's conditions, the pod's state, the run's outputs, the answers
of the API server — and the terminal, reasoned ``Decided`` it must end in.

Every failure mode of the controller redesign (issue 13) is one or more rows; they are marked
``FM1`` … ``FM8`` in their ids.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import replace

import pytest

from spx.api.conditions import DECIDED_REASONS, VERDICT_REASONS
from spx.api.loading import SpecError
from spx.api.policy import Policy
from spx.api.scheduling import DEFAULT_ADMISSION_TIMEOUT_SECONDS
from spx.controller.decide import conclusion as c
from spx.controller.decide import decision as dec
from spx.controller.manifests.naming import job_name

from .world import (
    JOB,
    SPEC,
    T0,
    ApiServer,
    actions,
    bench_outputs,
    cond,
    condition,
    drive,
    job,
    observed,
    pod,
    python_json_line,
    running_status,
    ts,
)

LOG, SUMMARY = bench_outputs()
REPEATED_LOG, _ = bench_outputs(tokens=(8, 8, 128))
PARTIAL_LOG, _ = bench_outputs(tokens=(8, 128), result=False)


def deletes(decisions: list[dec.Plan]) -> list[str]:
    return [n for a in actions(decisions) if isinstance(a, dec.DeleteJobs) for n in a.names]


def stored(decisions: list[dec.Plan]) -> list[dict]:
    return [a.manifest for a in actions(decisions) if isinstance(a, dec.StoreResult)]


# The terminal table ---------------------------------------------------------------------------------------
#
# (id, observed, API server answers, Decided reason, Completed reason, a fragment of the Decided message)

SUCCEEDED_POD = pod("Succeeded", exit_code=0, message=SUMMARY)
DELETED_POD = pod("Failed", exit_code=1, deleting=True)  # deletion asked for at 100 s; spx run exits 1 at 101 s
DELETED_POD["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = ts(101)
NAN_LINE = python_json_line("result", {"schemaVersion": "spx.dev/kernel-result/v1", "medianUs": math.nan})
INF_SUMMARY = '{"schemaVersion": "spx.dev/kernel-summary/v1", "points": [{"speedup": Infinity}]}'

TERMINAL = [
    ("pass: a complete result is judged", observed(status=running_status(), jobs=[job(cond("Complete"))],
                                                   pods=[SUCCEEDED_POD]),
     ApiServer(log=LOG), "verdict", "JobSucceeded", "verdict"),
    ("FM1 Job deleted while the watch was down: the API server says 404",
     observed(status=running_status(), jobs=[]), ApiServer(job_exists=False),
     "InfraFailed", "JobDeleted", f"Job {JOB} was deleted before it finished"),
    ("FM1 Job deleted mid-run: the points its pod wrote are kept",
     observed(status=running_status(), jobs=[], progress_log=PARTIAL_LOG), ApiServer(job_exists=False),
     "InfraFailed", "JobDeleted", "2 point(s) measured before it were kept"),
    ("a pod deleted while the bench ran (not evicted): its exit on SIGTERM is not a crash",
     observed(status=running_status(), jobs=[job(cond("Failed", reason="PodFailurePolicy"))],
              gone_pods=[DELETED_POD], progress_log=PARTIAL_LOG),
     ApiServer(log=None), "InfraFailed", "PodDeleted", "2 point(s) measured before it were kept"),
    ("FM2 a result line with NaN (json.dumps' output)",
     observed(status=running_status(), jobs=[job(cond("Complete"))], pods=[pod("Succeeded", exit_code=0)]),
     ApiServer(log=PARTIAL_LOG + NAN_LINE), "BenchmarkFailed", "JobSucceeded", "not standard JSON"),
    ("FM2 a summary with Infinity and no log",
     observed(status=running_status(), jobs=[job(cond("Complete"))], pods=[pod("Succeeded", exit_code=0, message=INF_SUMMARY)]),
     ApiServer(log=None), "BenchmarkFailed", "JobSucceeded", "Infinity is not a JSON number"),
    ("FM2 a valid result the analysis cannot use (a repeated token count)",
     observed(status=running_status(), jobs=[job(cond("Complete"))], pods=[pod("Succeeded", exit_code=0)]),
     ApiServer(log=REPEATED_LOG), "BenchmarkFailed", "JobSucceeded", "appear more than once"),
    ("FM3 the API server rejects the status (422)",
     observed(status=running_status(), jobs=[job()], pods=[pod("Running", running=True)],
              status_rejected="status.kernel.points[0].speedup: must be > 0"),
     ApiServer(), "InfraFailed", "StatusRejected", "must be > 0"),
    ("FM5 Kueue never admits (default bound)",
     observed(status=running_status("Queued"), jobs=[job(suspend=True, created=0)],
              now=T0 + dt.timedelta(seconds=DEFAULT_ADMISSION_TIMEOUT_SECONDS + 1)),
     ApiServer(), "InfraFailed", "NotAdmitted", "spec.scheduling.admissionTimeoutSeconds"),
    ("FM6 pod garbage-collected after it succeeded, operator away",
     observed(status=running_status(), jobs=[job(cond("Complete"))], pods=[]),
     ApiServer(log=None), "InfraFailed", "ResultLost", "removed before its result was read"),
    ("FM6 pod never scheduled before the deadline",
     observed(status=running_status("Pending"), pods=[pod("Pending", node=None, conditions=(
         cond("PodScheduled", "False", "Unschedulable", "0/64 nodes have 8 free nvidia.com/gpu"),))],
         jobs=[job(cond("Failed", reason="DeadlineExceeded"))]),
     ApiServer(), "InfraFailed", "NeverScheduled", "never scheduled before activeDeadlineSeconds"),
    ("FM6 node lost while the bench ran (phase Unknown)",
     observed(status=running_status(), jobs=[job(cond("Failed", reason="DeadlineExceeded"))],
              pods=[pod("Unknown", running=True)], progress_log=PARTIAL_LOG),
     ApiServer(log=None), "InfraFailed", "NodeLost", "node gpu-1 of pod"),
    ("FM6 node lost: the taint manager's DisruptionTarget",
     observed(status=running_status(), jobs=[job(cond("Failed", reason="DeadlineExceeded"))],
              pods=[pod("Failed", conditions=(cond("DisruptionTarget", reason="DeletionByTaintManager"),))],
              progress_log=PARTIAL_LOG),
     ApiServer(log=None), "InfraFailed", "NodeLost", "2 point(s) measured before it were kept"),
    ("FM7 FailureTarget, then the pod ended: decided on the pod's exit",
     observed(status=running_status(), jobs=[job(cond("FailureTarget", reason="PodFailurePolicy"))],
              pods=[pod("Failed", exit_code=1)]),
     ApiServer(log=PARTIAL_LOG), "BenchmarkFailed", "BenchmarkCrashed", "exit code 1"),
    ("FM7 SuccessCriteriaMet, then the pod ended: judged",
     observed(status=running_status(), jobs=[job(cond("SuccessCriteriaMet"))], pods=[SUCCEEDED_POD]),
     ApiServer(log=LOG), "verdict", "JobSucceeded", "verdict"),
    ("a slow bench still says it ran past the deadline",
     observed(status=running_status(), jobs=[job(cond("Failed", reason="DeadlineExceeded"))],
              pods=[pod("Failed", exit_code=137)]),
     ApiServer(log=PARTIAL_LOG), "InfraFailed", "DeadlineExceeded", "ran past activeDeadlineSeconds"),
    ("an invalid spec never reaches a GPU",
     observed(spec=SpecError(["spec.sweep.tokens: must not be empty"]), jobs=[job()]),
     ApiServer(), "InvalidSpec", "NotRun", "must not be empty"),
    ("the operator's policy refuses the image (SPX_POLICY)",
     observed(spec=SPEC.model_copy(update={"image": "docker.io/evil/miner:1"}),
              policy=Policy(image_registries=["ghcr.io/spx-dev/"])),
     ApiServer(), "InvalidSpec", "NotRun", "policy.imageRegistries: spec.image 'docker.io/evil/miner:1'"),
    ("the API server refuses the Job (403, quota)",
     observed(), ApiServer(refusal=dec.JobCreation(code=403, message="exceeded quota: gpu")),
     "InfraFailed", "JobRejected", "exceeded quota"),
]


@pytest.mark.parametrize(("o", "api", "decided", "completed", "fragment"), [row[1:] for row in TERMINAL],
                         ids=[row[0] for row in TERMINAL])
def test_every_run_ends_decided_with_its_reason(o: dec.Observed, api: ApiServer, decided: str, completed: str,
                                                fragment: str) -> None:
    final, decisions = drive(o, api)
    status = final.status
    d_status, d_reason, d_message = condition(status, "Decided")
    assert d_status == "True" and d_reason in DECIDED_REASONS
    if decided == "verdict":
        assert d_reason in VERDICT_REASONS and status.phase == "Succeeded" and status.verdict == d_reason
        assert condition(status, "Ready")[0] == "True" and condition(status, "Stalled")[0] == "False"
    else:
        assert d_reason == decided and status.phase == "Failed" and status.verdict is None
        assert condition(status, "Stalled") == ("True", decided, status.message)
        assert condition(status, "Ready")[0] == "False"
    assert condition(status, "Reconciling")[0] == "False"
    assert condition(status, "Completed")[:2] == ("True", completed)
    assert fragment in d_message or fragment in (status.message or ""), d_message
    assert all(x.observed_generation == 1 for x in status.conditions)
    # once decided, deciding again changes nothing and deletes no finished Job
    again = c.conclude(replace(final, status=status, status_rejected=None))
    assert again.status is None and again.need is None


def test_fm2_non_finite_results_keep_their_raw_output() -> None:
    o = observed(status=running_status(), jobs=[job(cond("Complete"))], pods=[pod("Succeeded", exit_code=0)])
    _, decisions = drive(o, ApiServer(log=PARTIAL_LOG + NAN_LINE))
    (cm,) = stored(decisions)
    assert "NaN" in cm["data"]["pod.log"]  # the raw line, as the pod wrote it
    assert "not standard JSON" in cm["data"]["problems.txt"]
    final = decisions[-1].status
    assert final is not None and [p.tokens for p in final.kernel.points] == [8, 128]  # points before it kept


@pytest.mark.parametrize("log", [PARTIAL_LOG, LOG], ids=["partial", "a whole result"])
def test_fm1_a_job_deleted_mid_run_keeps_its_points_and_log_and_recommends_nothing(log: str) -> None:
    """Someone deletes the run's Job while the bench runs: what the operator received from the pod's log
    stream is kept (points in the status, the log in the result ConfigMap), and the run — cut short, its
    exit unknown — publishes no crossover, threshold or verdict, even when the log holds a whole result."""
    o = observed(status=running_status(), jobs=[], progress_log=log)
    final, decisions = drive(o, ApiServer(job_exists=False))
    st = final.status
    assert condition(st, "Completed")[:2] == ("True", "JobDeleted") and st.verdict is None
    tokens = [8, 128] if log == PARTIAL_LOG else [8, 128, 2048]
    assert [p.tokens for p in st.kernel.points] == tokens
    assert st.kernel.crossover_tokens is None and st.kernel.recommended_threshold_tokens is None
    (cm,) = stored(decisions)
    assert cm["data"]["pod.log"] == log and st.result_config_map == cm["metadata"]["name"]
    assert "deleted before it finished" in cm["data"]["problems.txt"]
    assert "termination message" not in cm["data"]["problems.txt"]  # the pod's end was never seen
    # nothing received (deleted before the bench printed anything): decided all the same, nothing stored
    bare, decisions = drive(observed(status=running_status(), jobs=[]), ApiServer(job_exists=False))
    assert bare.status.kernel is None and stored(decisions) == [] and bare.status.result_config_map is None
    assert condition(bare.status, "Completed")[:2] == ("True", "JobDeleted")


def test_fm6_points_measured_before_a_node_loss_are_kept() -> None:
    o = observed(status=running_status(), jobs=[job(cond("Failed", reason="DeadlineExceeded"))],
                 pods=[pod("Unknown", running=True)], progress_log=PARTIAL_LOG)
    final, decisions = drive(o, ApiServer(log=None))  # the node is gone: its log with it
    assert [p.tokens for p in final.status.kernel.points] == [8, 128]
    assert "ran past" not in (final.status.message or "")
    (cm,) = stored(decisions)
    assert cm["data"]["pod.log"] == PARTIAL_LOG  # the log as read while the pod ran


def test_fm6_the_log_of_a_running_pod_is_read_while_it_runs() -> None:
    running = pod("Running", running=True)
    running["status"]["startTime"] = ts(0)
    o = observed(status=running_status(), jobs=[job()], pods=[running], progress_interval_s=30,
                 now=T0 + dt.timedelta(seconds=10))
    d = c.conclude(o)
    assert d.after == () and d.requeue_after_s == pytest.approx(20)  # running 10 s: first read at 30 s
    d = c.conclude(replace(o, now=T0 + dt.timedelta(seconds=31)))
    assert [type(a) for a in d.after] == [dec.ReadProgress] and d.requeue_after_s == 30
    recent = c.conclude(replace(o, now=T0 + dt.timedelta(seconds=40), progress_read_at=T0 + dt.timedelta(seconds=35),
                                progress_log=PARTIAL_LOG))
    assert recent.after == () and recent.requeue_after_s == pytest.approx(25)  # read 5 s ago: not yet again
    assert c.conclude(replace(o, progress_interval_s=0, now=T0 + dt.timedelta(seconds=99))).after == ()


# FM7: the Job decided before its pod ended — a matrix of (Job condition) × (pod state) -------------------

ENDING = ["FailureTarget", "SuccessCriteriaMet"]
POD_STATES = {
    "running": (pod("Running", running=True), "waits"),
    "terminating": (pod("Running", running=True, deleting=True), "waits"),
    "ended": (None, "decides"),
}


@pytest.mark.parametrize("condition_type", ENDING)
@pytest.mark.parametrize("pod_state", list(POD_STATES))
def test_fm7_decide_once_the_pod_has_ended_and_never_delete_the_job_meanwhile(condition_type: str, pod_state: str) -> None:
    the_pod, expected = POD_STATES[pod_state]
    if the_pod is None:
        the_pod = SUCCEEDED_POD if condition_type == "SuccessCriteriaMet" else pod("Failed", exit_code=1)
    o = observed(status=running_status(), jobs=[job(cond(condition_type))], pods=[the_pod])
    final, decisions = drive(o, ApiServer(log=LOG))
    assert deletes(decisions) == []
    if expected == "waits":
        assert final.status.phase == "Running" and condition(final.status, "Decided")[0] == "False"
        assert "waiting for pod" in (final.status.message or "")
        assert condition(final.status, "Reconciling")[0] == "True"
    else:
        assert condition(final.status, "Decided")[0] == "True"
    # a terminal status (e.g. decided on an earlier pass) does not delete a Job that is ending either
    done = replace(o, status=final.status.model_copy(update={"phase": "Failed"}))
    assert deletes([c.conclude(done)]) == []


# FM6: what a passed deadline means depends on the pod — a matrix -------------------------------------------

DEADLINE_PODS = [
    ("no pod", [], "NeverScheduled"),
    ("unbound pod", [pod("Pending", node=None)], "NeverScheduled"),
    ("bound, image never started", [pod("Pending", waiting="ContainerCreating")], "NeverStarted"),
    ("node lost (Unknown)", [pod("Unknown", running=True)], "NodeLost"),
    ("node lost (pod GC)", [pod("Failed", conditions=(cond("DisruptionTarget", reason="DeletionByPodGC"),))], "NodeLost"),
    ("the bench ran and was slow", [pod("Failed", exit_code=137)], "DeadlineExceeded"),
]


@pytest.mark.parametrize(("pods", "reason"), [r[1:] for r in DEADLINE_PODS], ids=[r[0] for r in DEADLINE_PODS])
def test_fm6_a_deadline_only_blames_the_bench_when_it_ran(pods: list[dict], reason: str) -> None:
    o = observed(status=running_status(), jobs=[job(cond("Failed", reason="DeadlineExceeded"))], pods=pods)
    final, _ = drive(o, ApiServer(log=None))
    assert condition(final.status, "Completed")[:2] == ("True", reason)
    assert condition(final.status, "Decided")[:2] == ("True", "InfraFailed")
    assert ("ran past activeDeadlineSeconds" in (final.status.message or "")) == (reason == "DeadlineExceeded")


# FM5: Kueue admission bound ---------------------------------------------------------------------------

@pytest.mark.parametrize(("bound", "waited", "outcome"), [
    (None, 60, "suspended"), (None, DEFAULT_ADMISSION_TIMEOUT_SECONDS, "not-admitted"),
    (600, 599, "suspended"), (600, 600, "not-admitted"),
])
def test_fm5_a_job_kueue_never_admits_ends_not_admitted_after_the_specs_bound(bound: int | None, waited: float,
                                                                              outcome: str) -> None:
    spec = SPEC if bound is None else SPEC.model_copy(update={
        "scheduling": SPEC.scheduling.model_copy(update={"queue_name": "gpus", "admission_timeout_seconds": bound})})
    o = observed(spec=spec, status=running_status("Queued"), jobs=[job(suspend=True)],
                 now=T0 + dt.timedelta(seconds=waited))
    d = c.conclude(o)
    assert d.outcome == outcome
    if outcome == "suspended":
        limit = bound or DEFAULT_ADMISSION_TIMEOUT_SECONDS
        assert d.requeue_after_s == pytest.approx(limit - waited + 0.2) and not d.after
    else:
        assert d.after == (dec.DeleteJobs((JOB,), "Kueue never admitted it"),) and d.slot_freed
        assert condition(d.status, "Scheduled")[:2] == ("False", "NotAdmitted")
        # without spec.scheduling.queueName it was not Kueue that suspended the Job (kubectl patch): said so
        assert ("not through Kueue" in (d.status.message or "")) == (bound is None)
        assert ("in LocalQueue gpus" in (d.status.message or "")) == (bound is not None)


# FM4: admission waits for the lists -------------------------------------------------------------------------

def test_fm4_no_job_is_created_before_experiments_and_jobs_are_listed() -> None:
    api = ApiServer(synced=False)
    final, decisions = drive(observed(), api)
    assert decisions[-1].outcome == "waiting-for-sync" and decisions[-1].requeue_after_s
    assert not any(isinstance(n, dec.CreateJob) for n in api.asked)
    assert all(d.status is None for d in decisions)  # nothing written: it is not Queued either
    final, _ = drive(observed(), ApiServer(synced=True))
    assert final.status.phase == "Pending" and final.status.job_name == JOB


def test_queued_under_the_limit_then_started() -> None:
    final, decisions = drive(observed(), ApiServer(admitted=False))
    assert final.status.phase == "Queued" and condition(final.status, "Decided")[1] == "Queued"
    assert condition(final.status, "Reconciling") == ("True", "Queued", final.status.message)


# FM8: the owner is being deleted ---------------------------------------------------------------------------

@pytest.mark.parametrize("pods", [[SUCCEEDED_POD], []])
def test_fm8_nothing_is_written_for_an_experiment_being_deleted(pods: list[dict]) -> None:
    o = observed(status=running_status("Analyzing"), jobs=[job(cond("Complete"))], pods=pods, deleting=True,
                 results=dec.Results(log=LOG))
    d = c.conclude(o)
    assert d == dec.Plan("deleting")


@pytest.mark.parametrize("finalizer", ["a foreign finalizer holds it", "foreground deletion"])
def test_fm8_a_run_of_an_experiment_being_deleted_is_stopped(finalizer: str) -> None:
    """The experiment is being deleted while its Job runs (another controller's finalizer can hold it,
    and with it the Job, for long): the running Job is deleted — its result would never be recorded —
    and nothing is written; a Job the garbage collector deletes already is left to it."""
    running = job()
    o = observed(status=running_status(), jobs=[running], pods=[pod("Running", running=True)], deleting=True)
    d = c.conclude(o)
    assert d.status is None and d.need is None and d.events == () and d.after == ()
    assert d.before == (dec.DeleteJobs((JOB,), "the experiment is being deleted"),) and d.slot_freed
    if finalizer == "foreground deletion":
        collected = {**running, "metadata": {**running["metadata"], "deletionTimestamp": ts(5)}}
        assert c.conclude(replace(o, jobs=[collected])) == dec.Plan("deleting")


# FM1: a stale Job is looked up before it is declared gone ----------------------------------------------------

def test_fm1_a_job_missing_from_the_store_is_asked_for_not_assumed_gone() -> None:
    api = ApiServer(job_exists=True)
    d = c.conclude(observed(status=running_status(), jobs=[]))
    assert d.need == dec.ConfirmJobGone(JOB) and d.status is None
    assert api.answer(d.need, observed()) == {}  # found: the reactor puts it into the store and decides again


def test_a_new_generation_supersedes_the_old_job() -> None:
    old = job()
    o = observed(generation=2, status=running_status(), jobs=[old])
    final, decisions = drive(o, ApiServer())
    assert deletes(decisions)[:1] == [JOB] and final.status.job_name == job_name("ds", 2)


def test_fm6_a_deadline_after_the_pod_was_seen_running_blames_the_bench_even_once_the_pod_is_gone() -> None:
    """The real Job controller deletes a Job's pods when its deadline passes: the pod list is then empty,
    but the run's Scheduled condition (set while the pod ran) says it did run (seen on a real API server)."""
    from spx.api.status import Condition

    seen = running_status().model_copy(update={"conditions": [
        Condition(type="Scheduled", status="True", reason="PodScheduled", message="the pod ran on node gpu-1",
                  last_transition_time=ts(1))]})
    o = observed(status=seen, jobs=[job(cond("Failed", reason="DeadlineExceeded"))], pods=[])
    final, _ = drive(o, ApiServer(log=None))
    assert condition(final.status, "Completed")[:2] == ("True", "DeadlineExceeded")
    assert "ran past activeDeadlineSeconds" in (final.status.message or "")
    # without that evidence an empty pod list still means the pod never got a node
    never = observed(status=running_status(), jobs=[job(cond("Failed", reason="DeadlineExceeded"))], pods=[])
    assert condition(drive(never, ApiServer(log=None))[0].status, "Completed")[:2] == ("True", "NeverScheduled")


REFUSED = "HTTP 403 Forbidden: exceeded quota: team-quota, requested: count/configmaps=1"


@pytest.mark.parametrize(("log", "outcome"), [(LOG, "verdict"), (PARTIAL_LOG, "BenchmarkFailed")])
def test_a_result_configmap_refused_for_good_does_not_hold_the_run_in_analyzing(log: str, outcome: str) -> None:
    """A quota (or an admission policy) refuses the result ConfigMap: the reactor decides again with the
    refusal, and the run is decided all the same — the verdict or the failure, the points in the status,
    no ConfigMap named, the refusal said (a ``ResultNotStored`` event with a verdict, the message without)."""
    the_pod = SUCCEEDED_POD if outcome == "verdict" else pod("Succeeded", exit_code=0)  # no summary either
    o = observed(status=running_status(), jobs=[job(cond("Complete"))], pods=[the_pod])
    first, decisions = drive(o, ApiServer(log=log))
    assert stored(decisions) and first.status.result_config_map  # as usual: stored, then named
    again = c.conclude(replace(o, status=decisions[-2].status or o.status, results=dec.Results(log=log),
                               store_refused=REFUSED))
    st = again.status
    assert st is not None and not [a for a in again.before if isinstance(a, dec.StoreResult)]
    assert st.result_config_map is None and condition(st, "Decided")[0] == "True"
    assert [p.tokens for p in st.kernel.points] == [p.tokens for p in first.status.kernel.points]
    if outcome == "verdict":
        assert st.verdict == first.status.verdict and st.phase == "Succeeded"
        assert ("Warning", "ResultNotStored", f"the result ConfigMap could not be written (the status keeps the "
                f"points): {REFUSED}") in again.events
    else:
        assert condition(st, "Decided")[1] == "BenchmarkFailed" and "exceeded quota" in (st.message or "")
    # a Job deleted mid-run: the same
    cut = c.conclude(observed(status=running_status(), jobs=[], progress_log=PARTIAL_LOG, job_gone=True,
                              store_refused=REFUSED))
    assert cut.status is not None and cut.before == () and cut.status.result_config_map is None
    assert "exceeded quota" in (cut.status.message or "") and len(cut.status.kernel.points) == 2


def test_fm5_a_job_kueue_preempts_waits_for_readmission_from_its_suspension_not_its_creation() -> None:
    """Kueue preempts a Job that ran for hours (it suspends it again; the Job controller deletes the pod
    and sets ``Suspended=True`` anew): the wait for re-admission is bounded from that suspension — not
    from the Job's creation, which would end a preempted long run NotAdmitted at once and delete it."""
    preempted_at = DEFAULT_ADMISSION_TIMEOUT_SECONDS - 600  # 10 min before the bound, counted from creation
    suspended = job(cond("Suspended", reason="JobSuspended", at=preempted_at), suspend=True, created=0)
    spec = SPEC.model_copy(update={"scheduling": SPEC.scheduling.model_copy(update={"queue_name": "gpus"})})
    o = observed(spec=spec, status=running_status("Running"), jobs=[suspended],
                 now=T0 + dt.timedelta(seconds=DEFAULT_ADMISSION_TIMEOUT_SECONDS + 60))
    d = c.conclude(o)
    assert d.outcome == "suspended" and not d.after and d.status is not None and d.status.phase == "Queued"
    assert d.requeue_after_s == pytest.approx(DEFAULT_ADMISSION_TIMEOUT_SECONDS - 660 + 0.2)
    late = c.conclude(replace(o, now=T0 + dt.timedelta(seconds=preempted_at + DEFAULT_ADMISSION_TIMEOUT_SECONDS)))
    assert late.outcome == "not-admitted" and late.after == (dec.DeleteJobs((JOB,), "Kueue never admitted it"),)
    assert "within 21600s of its suspension" in (late.status.message or "")
