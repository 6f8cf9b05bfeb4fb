"""One experiment's reconcile: observe it from the store, decide, answer the decision's questions
from the API server, carry out its effects. Effects only.

:class:`Reconciler` assembles an :class:`~spx.controller.decide.conclusion.Observed` from the
:class:`~spx.controller.decide.store.Store`, calls the pure :func:`~spx.controller.decide.conclusion.conclude`,
answers its questions (admission, "is the Job really gone", create the Job, read the results, are the
nodes Ready) and decides again, then carries out the rest: writes before the status, the status (a
409 backs off, a 422 is decided once more as ``StatusRejected`` and never abandoned), writes after.
The :class:`~spx.controller.reactor.Reactor` feeds it keys off its work queue.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from spx.api.loading import SpecError, validate_spec
from spx.api.spec import KIND, ExperimentSpec
from spx.api.status import ExperimentStatus
from spx.controller import metrics
from spx.controller.decide import admission
from spx.controller.decide import conclusion as c
from spx.controller.decide import conditions as cond
from spx.controller.decide import decision as dec
from spx.controller.decide.objects import deleting, generation, meta
from spx.controller.decide.store import Key, Store
from spx.controller.kube import ApiError
from spx.controller.logs import LogFollowers
from spx.controller.manifests.job import BenchOptions
from spx.controller.manifests.naming import KUEUE_QUEUE_LABEL, job_name
from spx.controller.reads import Reads
from spx.controller.settings import OperatorSettings
from spx.controller.workqueue import WorkQueue
from spx.controller.writes import Backoff, Conflict, ForeignConfigMap, Gone, Rejected, Writes

logger = logging.getLogger("spx.controller")

#: Questions answered per reconcile before giving up for now (a decision loop is a bug).
MAX_QUESTIONS = 7
#: Delays between re-writes of a status the API server rejected (422), seconds; the last one repeats.
REJECTED_RETRY_S = (1, 2, 5, 10, 30, 60)
#: Seconds to wait for a finished pod's log stream to deliver its last lines before deciding.
LOG_SETTLE_S = 10.0
#: Answers to the result ConfigMap's create that retrying will not change (quota, admission, invalid):
#: the run is decided without the ConfigMap (5xx, 429 and timeouts are retried).
STORE_REFUSALS = frozenset({400, 403, 404, 413, 422})


def _timeout(exp: Mapping[str, Any]) -> int | None:
    raw = (exp.get("spec") or {}).get("timeoutSeconds", ExperimentSpec.model_fields["timeout_seconds"].default)
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None


def _phase_since(status: Mapping[str, Any] | None) -> float | None:
    st = status or {}
    if st.get("phase") in cond.TERMINAL_PHASES:
        t = cond.parse_time(st.get("completionTime"))
        return t.timestamp() if t else None
    return None


class OwnWrites:
    """The operator's own writes, by (kind, namespace, name, resourceVersion): their watch events are
    echoes with nothing new to react to."""

    def __init__(self, limit: int = 100_000) -> None:
        self._marks: set[tuple[str, str, str, str]] = set()
        self._limit = limit

    @staticmethod
    def _mark(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
        m = meta(obj)
        return kind, str(m.get("namespace")), str(m.get("name")), str(m.get("resourceVersion"))

    def wrote(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Remember the object the API server answered a write of ours with."""
        if len(self._marks) > self._limit:  # echoes lost to a watch reconnect: forget them
            self._marks.clear()
        self._marks.add(self._mark(kind, obj))

    def echo(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """Is this watch event the echo of our own write (each echo is recognised once)?"""
        mark = self._mark(kind, obj)
        if mark in self._marks:
            self._marks.discard(mark)
            return True
        return False


@dataclass
class Reconciler:
    """Reconciles one experiment key at a time (the work queue never hands out a key twice at once).

    ``is_synced``, ``wake_queued`` and ``follow_if_running`` are the reactor's: whether the first
    re-list is done (admission waits for it), look at the experiments waiting for a slot, follow a
    running bench pod's log.
    """

    settings: OperatorSettings
    store: Store
    queue: WorkQueue
    writes: Writes
    reads: Reads
    logs: LogFollowers
    backoff: Backoff
    clock: Callable[[], dt.datetime]
    is_synced: Callable[[], bool]
    wake_queued: Callable[[], None]
    follow_if_running: Callable[[Mapping[str, Any]], None]
    own_writes: OwnWrites = field(default_factory=OwnWrites)
    #: Experiments admitted whose Job the store does not show yet (they hold a slot).
    reserved: set[Key] = field(default_factory=set)
    _specs: dict[tuple[str, int], ExperimentSpec | SpecError] = field(default_factory=dict)
    _rejections: dict[Key, int] = field(default_factory=dict)

    # Admission ----------------------------------------------------------------------------------------

    def active_keys(self) -> set[Key]:
        """Experiments holding a slot (see :func:`spx.controller.decide.admission.active`)."""
        return admission.active(self.store, self.reserved)

    def _admit(self, key: Key) -> dec.Admission:
        limit = self.settings.max_concurrent
        synced = self.is_synced()
        if admission.kueue_managed(self.store.experiments.get(key)):  # Kueue queues it: no second queue
            return dec.Admission(True, 0, 0, synced)
        if limit <= 0 and synced:  # no limit: no need to count (O(experiments + Jobs))
            return dec.Admission(True, 0, 0, True)
        v = admission.admit(key, limit, self.active_keys(), admission.waiting(self.store), synced,
                            admitting=self.reserved)
        if v.admitted:
            self.reserved.add(key)
        return dec.Admission(v.admitted, v.active, limit, v.synced)

    # The reconcile ------------------------------------------------------------------------------------

    def _spec(self, uid: str, gen: int, raw: Any, source: str) -> ExperimentSpec | SpecError:
        cached = self._specs.get((uid, gen))
        if cached is None:
            try:
                cached = validate_spec(raw, source=source)
            except SpecError as err:
                cached = err
            if len(self._specs) > 10_000:
                self._specs.clear()
            self._specs[(uid, gen)] = cached
        return cached

    def observed(self, key: Key, **answers: Any) -> dec.Observed | None:
        """The :class:`~spx.controller.decide.conclusion.Observed` of ``key`` from the store (None: no such experiment)."""
        exp = self.store.experiments.get(key)
        if exp is None:
            return None
        m = meta(exp)
        uid, gen = str(m.get("uid")), generation(exp)
        try:
            status = ExperimentStatus.model_validate(exp.get("status") or {})
        except ValidationError:
            status = ExperimentStatus()
        jobs = self.store.jobs_of(uid)
        pods = [p for j in jobs for p in self.store.pods_of(str(meta(j).get("uid")))]
        gone = [p for j in jobs for p in self.store.gone_pods_of(str(meta(j).get("uid")))]
        current = next((j for j in jobs if meta(j).get("name") == job_name(key[1], gen)), None)
        # (a Job deleted mid-run: what its pods wrote is still kept, by its name)
        current_uid = str(meta(current).get("uid")) if current is not None else self.logs.job_uid(key[0], job_name(key[1], gen))
        followed = self.logs.latest(current_uid) if current_uid is not None else None
        progress = (followed.received_at or self.clock(), followed.text) if followed is not None else None
        s = self.settings
        return dec.Observed(
            name=key[1], namespace=key[0], uid=uid, generation=gen,
            spec=self._spec(uid, gen, exp.get("spec"), f"{key[0]}/{key[1]}"), status=status, now=self.clock(),
            jobs=jobs, pods=pods, gone_pods=gone, deleting=deleting(exp), timeouts=s.timeouts, bench_image=s.bench_image,
            bench=BenchOptions(command=s.bench_command, service_account_name=s.bench_service_account,
                               shm_size=s.bench_shm_size, memory=s.bench_memory, model_cache=s.bench_model_cache,
                               image_pull_policy=s.bench_image_pull_policy,
                               extra_env=dict(s.extra_env), placement=s.bench_placement),
            progress_interval_s=s.progress_log_interval_s, policy=s.policy,
            progress_log=progress[1] if progress else None, progress_read_at=progress[0] if progress else None,
            **answers,
        )

    async def reconcile(self, key: Key) -> str:
        """Decide and act for experiment ``key``; the outcome label of ``spx_reconcile_total``."""
        o = self.observed(key)
        if o is None:
            metrics.forget_experiment(*key)
            self.reserved.discard(key)
            return "deleted"
        unlisted = [j for j in o.jobs if str(meta(j).get("uid")) not in self.reads.listed]
        if unlisted:  # the pod watch may not have delivered them yet (restart): list once
            for job in unlisted:
                await self.reads.pods(key[0], o.uid, str(meta(job).get("uid")))
            o = self.observed(key) or o
        try:
            for _ in range(MAX_QUESTIONS):
                d = c.conclude(o)
                stop = await self._carry_out(key, o, d)
                if stop is not None:
                    return stop
                if d.need is None:
                    return d.outcome
                answers = await self._answer(key, o, d.need)
                if isinstance(d.need, dec.CreateJob) and not answers:
                    # Created: admission ends here. The status (Pending, naming the Job) is written by a
                    # normal-priority reconcile, after the other new experiments got their Jobs.
                    self.queue.add(key)
                    return "job-created"
                fresh = self.observed(key, **{**_answers(o), **answers})
                if fresh is None:
                    return "deleted"
                o = fresh
            raise RuntimeError(f"no decision after {MAX_QUESTIONS} questions (last: {d.need})")
        finally:
            if key in self.reserved:  # its Job exists now (or it was refused): the next in the queue may go
                self.reserved.discard(key)
                self.wake_queued()

    async def _answer(self, key: Key, o: dec.Observed, need: dec.Need) -> dict[str, Any]:
        """Find out what ``need`` asks (from the API server); the answers for :class:`Observed`."""
        namespace = key[0]
        if isinstance(need, dec.AskAdmission):
            return {"admission": self._admit(key)}
        if isinstance(need, dec.ConfirmJobGone):
            job = await self.writes.job(namespace, need.name)
            if job is not None and o.uid in [r.get("uid") for r in meta(job).get("ownerReferences") or []]:
                job.setdefault("apiVersion", "batch/v1")
                job.setdefault("kind", "Job")
                self.store.put_job(job)
                await self.reads.pods(namespace, o.uid, str(meta(job).get("uid")))
                return {}
            cut = self.logs.job_uid(namespace, need.name)
            if cut is not None:  # deleted mid-run: its pod's stream delivers its last lines
                await self.logs.settle(cut, LOG_SETTLE_S)
            return {"job_gone": True}
        if isinstance(need, dec.CreateJob):
            queue = (need.manifest["metadata"].get("labels") or {}).get(KUEUE_QUEUE_LABEL)
            if queue and (why := await self.reads.queue_refusal(namespace, str(queue))):  # before any Job exists
                return {"creation": dec.JobCreation(reason=why[0], message=why[1])}
            job, refusal = await self.writes.create_job(need.manifest, o.uid)
            if job is None:
                return {"creation": refusal}
            self.store.put_job(job)
            self.own_writes.wrote("Job", job)
            self.reads.listed.add(str(meta(job).get("uid")))
            return {}
        if isinstance(need, dec.FetchFailedCreate):
            job = self.store.jobs.get((namespace, need.job))
            return {"failed_create": await self.reads.failed_create(namespace, job) if job else ""}
        if isinstance(need, dec.ReadResults):
            # (StoreResult re-reads the owner from the API server before the ConfigMap is written.)
            this = next((j for j in o.jobs if meta(j).get("name") == job_name(key[1], o.generation)), None)
            if this is not None:  # the stream of the pod that just ended delivers its last lines
                await self.logs.settle(str(meta(this).get("uid")), LOG_SETTLE_S)
            log = await self.reads.log(namespace, need.pod) if need.pod else None
            followed = self.logs.latest(str(meta(this).get("uid"))) if this is not None else None
            return {"results": dec.Results(log=log, progress_log=followed.text if followed else o.progress_log)}
        if isinstance(need, dec.CheckNodes):
            return {"nodes": {name: await self.reads.node_ready(name) for name in need.names}}
        raise TypeError(f"unknown need {need!r}")

    async def _carry_out(self, key: Key, o: dec.Observed, d: dec.Plan) -> str | None:
        """Effects before, the status, effects after; a string ends the reconcile with that outcome."""
        exp = self.store.experiments.get(key)
        if exp is None:
            return "deleted"
        for action in d.before:
            try:
                stop = await self._act(key, o, exp, action)
            except ApiError as err:
                refused_for_good = err.code in STORE_REFUSALS or isinstance(err, ForeignConfigMap)
                if not (isinstance(action, dec.StoreResult) and refused_for_good) or o.store_refused is not None:
                    raise
                # refused for good (a quota, an admission policy): decide without it, saying why
                logger.warning("%s/%s: the API server refused the result ConfigMap: %s; deciding without it",
                               key[0], key[1], err)
                metrics.count_error("configmap")
                refused = replace(o, store_refused=f"HTTP {err.code} {err.reason}: {err.message}"[:512])
                again = c.conclude(refused)
                return await self._carry_out(key, refused, again) or again.outcome
            if stop:
                return stop
        if d.status is not None:
            wire = d.status.to_wire()
            if wire != (exp.get("status") or {}):
                try:
                    updated = await self.writes.status(exp, d.status)
                except Gone:
                    self.store.put_experiment(exp, deleted=True)
                    return "deleted"
                except Conflict:
                    fresh = await self.writes.experiment(*key)
                    if fresh is None:
                        self.store.put_experiment(exp, deleted=True)
                        return "deleted"
                    self.store.put_experiment(fresh)
                    self.queue.add_after(key, self.backoff.next_delay(key))
                    return "conflict"
                except Rejected as err:
                    return await self._rejected(key, o, d, err.message)
                self.backoff.reset(key)
                self._rejections.pop(key, None)
                self.store.put_experiment(updated)
                self.own_writes.wrote(KIND, updated)
                old_phase = (exp.get("status") or {}).get("phase")
                if old_phase != d.status.phase:
                    logger.info("%s/%s: %s → %s: %s", key[0], key[1], old_phase or "new", d.status.phase,
                                d.status.message or "", extra={"experiment": key[1], "namespace": key[0],
                                                               "phase": d.status.phase})
                exp = updated
                if d.status.phase in cond.TERMINAL_PHASES:  # decided: the followed logs are in the status
                    for job in o.jobs:
                        self.logs.forget_job(str(meta(job).get("uid")))
                    if (deleted := self.logs.job_uid(key[0], job_name(key[1], o.generation))) is not None:
                        self.logs.forget_job(deleted)  # a Job deleted mid-run
                for type_, reason, message in d.events:
                    self.writes.event_soon(updated, type_, reason, message)
                if d.observed_duration:
                    started = cond.parse_time(d.status.start_time)
                    if started is not None:
                        metrics.observe_duration((o.now - started).total_seconds())
            metrics.observe_experiment(key[0], key[1], exp.get("status"), _phase_since(exp.get("status")), _timeout(exp),
                                       spec=exp.get("spec"))
        elif d.need is None:
            metrics.observe_experiment(key[0], key[1], exp.get("status"), _phase_since(exp.get("status")), _timeout(exp),
                                       spec=exp.get("spec"))
        for action in d.after:
            await self._act(key, o, exp, action)
        if d.slot_freed:
            self.reserved.discard(key)
            self.wake_queued()
        if d.requeue_after_s is not None:
            self.queue.add_after(key, max(0.05, d.requeue_after_s))
        return None

    async def _act(self, key: Key, o: dec.Observed, exp: Mapping[str, Any], action: dec.Action) -> str | None:
        namespace = key[0]
        if isinstance(action, dec.DeleteJobs):
            for jname in action.names:
                await self.writes.delete_job(namespace, jname)
                job = self.store.jobs.get((namespace, jname))
                if job is not None:
                    self.store.put_job(job, deleted=True)
                self.writes.event_soon(exp, "Normal", "JobDeleted", f"deleted Job {jname}: {action.why}")
            self.wake_queued()
        elif isinstance(action, dec.StoreResult):
            if not await self.writes.owner_alive(namespace, key[1], o.uid):
                logger.info("%s/%s is gone or being deleted: its result ConfigMap is not written", *key)
                return "deleted"
            await self.writes.configmap(action.manifest)
        elif isinstance(action, dec.ReadProgress):
            pod = self.store.pods.get((namespace, action.pod))
            if pod is not None:  # the stream is the read: make sure it is followed
                self.follow_if_running(pod)
        return None

    async def _rejected(self, key: Key, o: dec.Observed, d: dec.Plan, message: str) -> str:
        """A 422 on a status write: decide once more with the refusal (a minimal, terminal
        ``InfraFailed``/``StatusRejected`` status). If even that is refused, re-read the experiment from
        the API server and decide again from it after ``REJECTED_RETRY_S`` (never abandoned)."""
        metrics.count_error("status")
        if o.status_rejected is None:
            logger.warning("%s/%s (generation %d): the API server rejected the status write: %s; deciding "
                           "InfraFailed/StatusRejected", key[0], key[1], o.generation, message)
            again = c.conclude(replace(o, status_rejected=message[:512]))
            outcome = await self._carry_out(key, replace(o, status_rejected=message[:512]), again)
            return outcome or again.outcome
        n = self._rejections.get(key, 0)
        self._rejections[key] = n + 1
        delay = REJECTED_RETRY_S[min(n, len(REJECTED_RETRY_S) - 1)]
        logger.error("%s/%s (generation %d): the API server rejects even the minimal status: %s; re-reading the "
                     "experiment and writing again in %ss (attempt %d)", key[0], key[1], o.generation, message,
                     delay, n + 1)
        fresh = await self.writes.experiment(*key)
        if fresh is None:
            self.store.put_experiment(self.store.experiments.get(key) or {"metadata": {}}, deleted=True)
            return "deleted"
        self.store.put_experiment(fresh)
        self.queue.add_after(key, delay)
        return "status-rejected"


def _answers(o: dec.Observed) -> dict[str, Any]:
    """The answers already in ``o`` (carried into the next :func:`conclude`)."""
    return {k: getattr(o, k) for k in ("admission", "creation", "job_gone", "failed_create", "results", "status_rejected",
                                      "nodes")
            if getattr(o, k) not in (None, False)}
