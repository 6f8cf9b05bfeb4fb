"""The reactor: carries out the decisions of :mod:`spx.controller.conclusion`. Effects only.

kopf's watch events go into the :class:`~spx.controller.store.Store` and put the owning
experiment's key on the :class:`~spx.controller.workqueue.WorkQueue`. Workers take keys off the
queue (never the same key twice at once), assemble an :class:`~spx.controller.conclusion.Observed`
from the store, call the pure :func:`~spx.controller.conclusion.conclude`, answer its questions
(then decide again) and carry out the rest: writes before the status, the status, writes after.

The API server, not the cache, is the truth: at start-up and every ``SPX_RESYNC_SECONDS`` the
reactor lists experiments, Jobs and pods itself and corrects the store; admission waits for the first
of those lists (:mod:`spx.controller.admission`); a Job the status names and the store lacks is
looked up before it is declared gone; the owner is re-read before a child is written. When kopf
re-lists (after a ``410 Gone`` or a reconnect: it reports no deletions), the reactor re-lists too and
reconciles at once every experiment whose Job or pod vanished (:mod:`spx.controller.relist`).

Nothing the bench wrote is lost with its pod: the store keeps the last state of deleted pods, and the
reactor follows the log stream of every running bench pod (:mod:`spx.controller.logs`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from spx.api.loading import SpecError, validate_spec
from spx.api.spec import KIND, PLURAL, ExperimentSpec
from spx.api.status import ExperimentStatus
from spx.controller import admission, metrics, relist, retention
from spx.controller import conclusion as c
from spx.controller import conditions as cond
from spx.controller.kube import ApiError, KubeClient, resource_path
from spx.controller.leader import LeaderElector
from spx.controller.logs import LogFollowers
from spx.controller.manifests import (
    KUEUE_QUEUE_LABEL,
    BenchOptions,
    job_name,
)
from spx.controller.memory import Trimmer
from spx.controller.objects import POD_ENDED_PHASES, owner_uid
from spx.controller.reads import Reads
from spx.controller.settings import OperatorSettings
from spx.controller.store import Key, Store, deleting, generation, meta
from spx.controller.workqueue import WorkQueue
from spx.controller.writes import EXPERIMENT_API, Backoff, Conflict, Gone, Rejected, Writes

logger = logging.getLogger("spx.controller")

#: Retry delays after an unexpected error (an API failure other than a conflict), seconds.
ERROR_BACKOFF_S = (0.5, 1, 2, 5, 10, 30, 60)
#: Questions answered per reconcile before giving up for now (a decision loop is a bug).
MAX_QUESTIONS = 7
#: Delays between re-writes of a status the API server rejected (422), seconds; the last one repeats.
REJECTED_RETRY_S = (1, 2, 5, 10, 30, 60)
#: Seconds to wait for a finished pod's log stream to deliver its last lines before deciding.
LOG_SETTLE_S = 10.0
#: Seconds after kopf's last re-listed object before the reactor re-lists (410 Gone, watch restart).
RELIST_DEBOUNCE_S = 0.5


def _timeout(exp: Mapping[str, Any]) -> int | None:
    raw = (exp.get("spec") or {}).get("timeoutSeconds", ExperimentSpec.model_fields["timeout_seconds"].default)
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None


def _phase_since(status: Mapping[str, Any] | None) -> float | None:
    st = status or {}
    if st.get("phase") in cond.TERMINAL_PHASES:
        t = cond.parse_time(st.get("completionTime"))
        return t.timestamp() if t else None
    return None


@dataclass
class Reactor:
    """Workers that reconcile experiment keys off :attr:`queue` against :attr:`store`."""

    settings: OperatorSettings
    client: KubeClient
    store: Store = field(default_factory=Store)
    queue: WorkQueue = field(default_factory=lambda: WorkQueue(on_depth=metrics.set_workqueue_depth))
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    synced: bool = False
    last_reconcile: float = 0.0
    writes: Writes = field(init=False)
    reads: Reads = field(init=False)
    backoff: Backoff = field(init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _reserved: set[Key] = field(default_factory=set)
    _failures: dict[Key, int] = field(default_factory=dict)
    _own_writes: set[tuple[str, str, str, str]] = field(default_factory=set)
    _specs: dict[tuple[str, int], ExperimentSpec | SpecError] = field(default_factory=dict)
    _progress: dict[str, tuple[dt.datetime, str]] = field(default_factory=dict)
    _rejections: dict[Key, int] = field(default_factory=dict)
    _stalled: set[Key] = field(default_factory=set)
    _relist_timer: asyncio.TimerHandle | None = None
    _oneshots: set[asyncio.Task[None]] = field(default_factory=set)
    logs: LogFollowers = field(init=False)
    #: Returns the heap a burst freed to the OS once the queue drains (:mod:`spx.controller.memory`).
    trimmer: Trimmer = field(default_factory=Trimmer)
    #: With several replicas (SPX_LEADER_ELECTION): only the Lease holder's workers reconcile.
    leader: LeaderElector | None = None

    def __post_init__(self) -> None:
        self.writes = Writes(self.client, lambda: cond.now_rfc3339(self.clock()))
        self.reads = Reads(self.client, self.store, self.settings.log_limit_bytes)
        self.backoff = Backoff(self.settings.conflict_backoff_s, self.settings.conflict_backoff_max_s)
        self.logs = LogFollowers(self.client, self.settings.log_limit_bytes, self._pod_running, self.clock)

    # Lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.leader is not None:
            self._tasks.append(asyncio.create_task(self.leader.run(), name="spx-leader-election"))
        for i in range(self.settings.workers):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"spx-reconcile-{i}"))
        self._tasks.append(asyncio.create_task(self._resync_loop(), name="spx-resync"))

    async def stop(self) -> None:
        await self.writes.drain()
        await self.logs.stop()
        if self._relist_timer is not None:
            self._relist_timer.cancel()
        for task in list(self._oneshots):
            task.cancel()
        if self.leader is not None:
            await self.leader.release()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        self.queue.close()
        self.trimmer.close()
        await self.client.close()

    def dead_tasks(self) -> list[str]:
        """Names of the reactor's background tasks that have ended (they never should)."""
        return [t.get_name() for t in self._tasks if t.done()]

    async def resync(self, everything: bool = True) -> None:
        """List experiments, then Jobs and pods, from the API server; correct the store; reconcile every
        experiment (``everything``) or those whose objects vanished (after kopf re-listed)."""
        scopes = relist.scopes(self.settings.watch_namespaces)
        try:
            affected = await relist.relist(self.client, self.store, scopes)
        except ApiError as err:
            if err.code != 403 or scopes != [None]:
                raise
            # Namespaced RBAC and namespace patterns: the namespaces seen so far, one by one.
            affected = await relist.relist(self.client, self.store, sorted({k[0] for k in self.store.experiments}))
        self.reads.listed.update(self.store.job_by_uid)
        await self._expire()
        if not self.synced:
            self.synced = True
            logger.info("listed %d experiments and %d Jobs: admission open", len(self.store.experiments),
                        len(self.store.jobs))
        self._unstall()
        for key in list(self.store.experiments) if everything else sorted(affected):
            self.queue.add(key)
        if affected:
            logger.info("re-list: %d experiment(s) whose Job or pod vanished reconciled now", len(affected))

    def _relisted(self, event_type: str | None) -> None:
        """kopf delivers the objects of a (re-)list with no event type: after a 410 Gone, or any watch
        restart that lists again, deletions during the gap are not reported — re-list ourselves (once,
        shortly after the last such object) and reconcile what vanished at once."""
        if event_type is not None or not self.synced:
            return
        loop = asyncio.get_running_loop()
        if self._relist_timer is not None:
            self._relist_timer.cancel()
        self._relist_timer = loop.call_later(RELIST_DEBOUNCE_S, lambda: self._spawn(self._relist_now()))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro, name="spx-relist")
        self._oneshots.add(task)
        task.add_done_callback(self._oneshots.discard)

    async def _relist_now(self) -> None:
        self._relist_timer = None
        try:
            await self.resync(everything=False)
        except Exception as err:  # the periodic re-list is the backstop
            metrics.count_error("resync")
            logger.warning("re-list after a watch restart failed: %s", err)

    def _unstall(self) -> None:
        """The API server answers again: retry at once the experiments whose reconcile failed on it."""
        if self._stalled:
            for key in self._stalled:
                self.queue.add(key)
            self._stalled.clear()

    async def _expire(self) -> None:
        """Delete the experiments past ``SPX_FINISHED_RETENTION_SECONDS`` (:mod:`spx.controller.retention`);
        only the leader does, and a failed delete is retried at the next re-list."""
        if self.settings.finished_retention_s <= 0 or (self.leader is not None and not self.leader.is_leader):
            return
        for namespace, name in retention.due(self.store.experiments.values(), self.clock(),
                                             self.settings.finished_retention_s):
            try:
                await self.client.delete(resource_path(EXPERIMENT_API, PLURAL, namespace, name))
                logger.info("deleted %s/%s: decided more than %.0f s ago (SPX_FINISHED_RETENTION_SECONDS)",
                            namespace, name, self.settings.finished_retention_s)
            except ApiError as err:
                if not err.not_found:
                    logger.warning("could not delete the expired experiment %s/%s: %s", namespace, name, err)

    async def _resync_loop(self) -> None:
        delay = 0.0
        while True:
            await asyncio.sleep(delay)
            try:
                await self.resync()
                delay = self.settings.resync_s * (0.9 + 0.2 * random.random())
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the API server is unreachable: try again soon
                metrics.count_error("resync")
                delay = 2.0 if not self.synced else min(60.0, self.settings.resync_s)
                logger.warning("re-list from the API server failed (next try in %.0fs): %s", delay, err)

    async def _worker(self) -> None:
        while True:
            if self.leader is not None:
                await self.leader.wait_leading()
            key = await self.queue.get()
            if self.leader is not None and not self.leader.is_leader:  # deposed while waiting: keep the key
                self.queue.done(key)
                self.queue.add(key)
                continue
            started = time.monotonic()
            try:
                outcome = await self.reconcile(key)
                self._failures.pop(key, None)
                metrics.count_reconcile("experiment", outcome)
                metrics.observe_reconcile("experiment", outcome, time.monotonic() - started)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                metrics.observe_reconcile("experiment", "error", time.monotonic() - started)
                n = self._failures.get(key, 0)
                self._failures[key] = n + 1
                delay = ERROR_BACKOFF_S[min(n, len(ERROR_BACKOFF_S) - 1)] * (0.5 + random.random())
                metrics.count_error("experiment")
                if not (isinstance(err, ApiError) and 400 <= err.code < 500):
                    self._stalled.add(key)  # retried at once when the API server answers again
                logger.warning("reconcile of %s/%s failed (retry in %.1fs): %s", key[0], key[1], delay, err,
                               exc_info=not isinstance(err, ApiError | LookupError))
                self.queue.add_after(key, delay)
            finally:
                self.last_reconcile = time.time()
                self.queue.done(key)
                if not len(self.queue):
                    self.trimmer.idle()

    # Events from kopf ---------------------------------------------------------------------------------

    def _mark(self, kind: str, obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
        m = meta(obj)
        return kind, str(m.get("namespace")), str(m.get("name")), str(m.get("resourceVersion"))

    def _echo(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """Is this watch event the echo of the operator's own write (nothing new to react to)?"""
        mark = self._mark(kind, obj)
        if mark in self._own_writes:
            self._own_writes.discard(mark)
            return True
        return False

    def _wrote(self, kind: str, obj: Mapping[str, Any]) -> None:
        if len(self._own_writes) > 100_000:  # echoes lost to a watch reconnect: forget them
            self._own_writes.clear()
        self._own_writes.add(self._mark(kind, obj))

    def on_experiment(self, event_type: str | None, obj: dict[str, Any]) -> None:
        gone = event_type == "DELETED"
        self._unstall()
        self._relisted(event_type)
        self.store.put_experiment(obj, deleted=gone)
        if not gone and self._echo(KIND, obj):
            return
        m = meta(obj)
        new_run = (obj.get("status") or {}).get("observedGeneration") != m.get("generation")
        self.queue.add(Store._key(obj), urgent=new_run and not gone)
        if gone:
            for job in self.store.jobs_of(str(m.get("uid"))):  # garbage-collected with it
                self.logs.forget_job(str(meta(job).get("uid")))
                for pod in self.store.pods_of(str(meta(job).get("uid"))):
                    self.store.put_pod(pod, deleted=True)
                self.store.put_job(job, deleted=True)
            self.wake_queued()

    def on_job(self, event_type: str | None, obj: dict[str, Any]) -> None:
        gone = event_type == "DELETED"
        self._unstall()
        self._relisted(event_type)
        old = self.store.jobs.get(Store._key(obj))
        self.store.put_job(obj, deleted=gone)
        if not gone and self._echo("Job", obj):
            return
        key = self.store.experiment_of_job(obj)
        if gone:
            self.logs.forget_job(str(meta(obj).get("uid")))
        if key is not None:
            self.queue.add(key)
        if gone or (c.job_finished(obj) and (old is None or not c.job_finished(old))):
            self.wake_queued()

    def on_pod(self, event_type: str | None, obj: dict[str, Any]) -> None:
        gone = event_type == "DELETED"
        self._unstall()
        self._relisted(event_type)
        self.store.put_pod(obj, deleted=gone)  # (its last state and its followed log outlive the pod)
        key = self.store.experiment_of_pod(obj)
        if key is not None:
            if not gone:
                self._follow_if_running(obj)
            self.queue.add(key)

    def _follow_if_running(self, pod: Mapping[str, Any]) -> None:
        """Follow the log of a bench pod whose container runs (see :mod:`spx.controller.logs`)."""
        st = pod.get("status") or {}
        if st.get("phase") != "Running" or not (pod.get("spec") or {}).get("nodeName"):
            return
        m = meta(pod)
        job_uid = owner_uid(pod, "Job")
        if job_uid and not self.logs.following(str(m.get("uid"))):
            self.logs.follow(str(m.get("namespace")), str(m.get("name")), str(m.get("uid")), job_uid)

    def _pod_running(self, namespace: str, name: str, pod_uid: str) -> bool:
        """The pod is in the store, not being deleted and not ended (its log stream should go on)."""
        pod = self.store.pods.get((namespace, name))
        if pod is None or str(meta(pod).get("uid")) != pod_uid:
            return False
        return (pod.get("status") or {}).get("phase") not in POD_ENDED_PHASES and not deleting(pod)

    def wake_queued(self) -> None:
        """A slot may have freed up: look at the experiments waiting for one."""
        if self.settings.max_concurrent > 0:
            for key in self._waiting():
                self.queue.add(key)

    # Admission ----------------------------------------------------------------------------------------

    def active_keys(self) -> set[Key]:
        """Experiments holding a slot (see :func:`spx.controller.admission.active`)."""
        return admission.active(self.store, self._reserved)

    def _waiting(self) -> list[Key]:
        return admission.waiting(self.store)

    def _admit(self, key: Key) -> c.Admission:
        limit = self.settings.max_concurrent
        if limit <= 0 and self.synced:  # no limit: no need to count (O(experiments + Jobs))
            return c.Admission(True, 0, 0, True)
        v = admission.admit(key, limit, self.active_keys(), self._waiting(), self.synced)
        if v.admitted:
            self._reserved.add(key)
        return c.Admission(v.admitted, v.active, limit, v.synced)

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

    def observed(self, key: Key, **answers: Any) -> c.Observed | None:
        """The :class:`~spx.controller.conclusion.Observed` of ``key`` from the store (None: no such experiment)."""
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
        followed = self.logs.latest(str(meta(current).get("uid"))) if current is not None else None
        progress = (followed.received_at or self.clock(), followed.text) if followed is not None else None
        s = self.settings
        return c.Observed(
            name=key[1], namespace=key[0], uid=uid, generation=gen,
            spec=self._spec(uid, gen, exp.get("spec"), f"{key[0]}/{key[1]}"), status=status, now=self.clock(),
            jobs=jobs, pods=pods, gone_pods=gone, deleting=deleting(exp), timeouts=s.timeouts, bench_image=s.bench_image,
            bench=BenchOptions(command=s.bench_command, service_account_name=s.bench_service_account,
                               shm_size=s.bench_shm_size, image_pull_policy=s.bench_image_pull_policy,
                               extra_env=dict(s.extra_env)),
            progress_interval_s=s.progress_log_interval_s, policy=s.policy,
            progress_log=progress[1] if progress else None, progress_read_at=progress[0] if progress else None,
            **answers,
        )

    async def reconcile(self, key: Key) -> str:
        """Decide and act for experiment ``key``; the outcome label of ``spx_reconcile_total``."""
        o = self.observed(key)
        if o is None:
            metrics.forget_experiment(*key)
            self._reserved.discard(key)
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
                if isinstance(d.need, c.CreateJob) and not answers:
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
            self._reserved.discard(key)

    async def _answer(self, key: Key, o: c.Observed, need: c.Need) -> dict[str, Any]:
        """Find out what ``need`` asks (from the API server); the answers for :class:`Observed`."""
        namespace = key[0]
        if isinstance(need, c.AskAdmission):
            return {"admission": self._admit(key)}
        if isinstance(need, c.ConfirmJobGone):
            job = await self.writes.job(namespace, need.name)
            if job is not None and o.uid in [r.get("uid") for r in meta(job).get("ownerReferences") or []]:
                job.setdefault("apiVersion", "batch/v1")
                job.setdefault("kind", "Job")
                self.store.put_job(job)
                await self.reads.pods(namespace, o.uid, str(meta(job).get("uid")))
                return {}
            return {"job_gone": True}
        if isinstance(need, c.CreateJob):
            queue = (need.manifest["metadata"].get("labels") or {}).get(KUEUE_QUEUE_LABEL)
            if queue and (why := await self.reads.queue_refusal(namespace, str(queue))):  # before any Job exists
                return {"creation": c.JobCreation(reason=why[0], message=why[1])}
            job, refusal = await self.writes.create_job(need.manifest, o.uid)
            if job is None:
                return {"creation": refusal}
            self.store.put_job(job)
            self._wrote("Job", job)
            self.reads.listed.add(str(meta(job).get("uid")))
            return {}
        if isinstance(need, c.FetchFailedCreate):
            job = self.store.jobs.get((namespace, need.job))
            return {"failed_create": await self.reads.failed_create(namespace, job) if job else ""}
        if isinstance(need, c.ReadResults):
            # (StoreResult re-reads the owner from the API server before the ConfigMap is written.)
            this = next((j for j in o.jobs if meta(j).get("name") == job_name(key[1], o.generation)), None)
            if this is not None:  # the stream of the pod that just ended delivers its last lines
                await self.logs.settle(str(meta(this).get("uid")), LOG_SETTLE_S)
            log = await self.reads.log(namespace, need.pod) if need.pod else None
            followed = self.logs.latest(str(meta(this).get("uid"))) if this is not None else None
            return {"results": c.Results(log=log, progress_log=followed.text if followed else o.progress_log)}
        if isinstance(need, c.CheckNodes):
            return {"nodes": {name: await self.reads.node_ready(name) for name in need.names}}
        raise TypeError(f"unknown need {need!r}")

    async def _carry_out(self, key: Key, o: c.Observed, d: c.Decision) -> str | None:
        """Effects before, the status, effects after; a string ends the reconcile with that outcome."""
        exp = self.store.experiments.get(key)
        if exp is None:
            return "deleted"
        for action in d.before:
            stop = await self._act(key, o, exp, action)
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
                self._wrote(KIND, updated)
                old_phase = (exp.get("status") or {}).get("phase")
                if old_phase != d.status.phase:
                    logger.info("%s/%s: %s → %s: %s", key[0], key[1], old_phase or "new", d.status.phase,
                                d.status.message or "", extra={"experiment": key[1], "namespace": key[0],
                                                               "phase": d.status.phase})
                exp = updated
                if d.status.phase in cond.TERMINAL_PHASES:  # decided: the followed logs are in the status
                    for job in o.jobs:
                        self.logs.forget_job(str(meta(job).get("uid")))
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
            self._reserved.discard(key)
            self.wake_queued()
        if d.requeue_after_s is not None:
            self.queue.add_after(key, max(0.05, d.requeue_after_s))
        return None

    async def _act(self, key: Key, o: c.Observed, exp: Mapping[str, Any], action: c.Action) -> str | None:
        namespace = key[0]
        if isinstance(action, c.DeleteJobs):
            for jname in action.names:
                await self.writes.delete_job(namespace, jname)
                job = self.store.jobs.get((namespace, jname))
                if job is not None:
                    self.store.put_job(job, deleted=True)
                self.writes.event_soon(exp, "Normal", "JobDeleted", f"deleted Job {jname}: {action.why}")
            self.wake_queued()
        elif isinstance(action, c.StoreResult):
            if not await self.writes.owner_alive(namespace, key[1], o.uid):
                logger.info("%s/%s is gone or being deleted: its result ConfigMap is not written", *key)
                return "deleted"
            await self.writes.configmap(action.manifest)
        elif isinstance(action, c.ReadProgress):
            pod = self.store.pods.get((namespace, action.pod))
            if pod is not None:  # the stream is the read: make sure it is followed
                self._follow_if_running(pod)
        return None

    async def _rejected(self, key: Key, o: c.Observed, d: c.Decision, message: str) -> str:
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


def _answers(o: c.Observed) -> dict[str, Any]:
    """The answers already in ``o`` (carried into the next :func:`conclude`)."""
    return {k: getattr(o, k) for k in ("admission", "creation", "job_gone", "failed_create", "results", "status_rejected",
                                      "nodes")
            if getattr(o, k) not in (None, False)}
