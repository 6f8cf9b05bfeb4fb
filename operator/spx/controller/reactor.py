"""The reactor: kopf's watch events in, reconcile workers out, re-lists in between. Effects only.

kopf's watch events go into the :class:`~spx.controller.decide.store.Store` and put the owning
experiment's key on the :class:`~spx.controller.workqueue.WorkQueue`. Workers take keys off the
queue (never the same key twice at once) and hand each to the
:class:`~spx.controller.reconciler.Reconciler` (observe, decide with the pure
:func:`~spx.controller.decide.conclusion.conclude`, answer its questions, carry out its effects).

The API server, not the cache, is the truth: at start-up and every ``SPX_RESYNC_SECONDS`` the
reactor lists experiments, Jobs and pods itself and corrects the store; admission waits for the first
of those lists (:mod:`spx.controller.decide.admission`); a Job the status names and the store lacks is
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
from dataclasses import dataclass, field
from typing import Any

from spx.api.spec import API_VERSION, KIND, PLURAL
from spx.controller import metrics, relist
from spx.controller.decide import admission, retention
from spx.controller.decide import conditions as cond
from spx.controller.decide import decision as dec
from spx.controller.decide.job_status import job_finished
from spx.controller.decide.objects import POD_ENDED_PHASES, deleting, meta, owner_uid
from spx.controller.decide.store import Key, Store
from spx.controller.kube import ApiError, KubeClient, resource_path
from spx.controller.leader import LeaderElector
from spx.controller.logs import LogFollowers
from spx.controller.memory import Trimmer
from spx.controller.reads import Reads
from spx.controller.reconciler import Reconciler
from spx.controller.settings import OperatorSettings
from spx.controller.workqueue import WorkQueue
from spx.controller.writes import Backoff, Writes

logger = logging.getLogger("spx.controller")

#: Retry delays after an unexpected error (an API failure other than a conflict), seconds.
ERROR_BACKOFF_S = (0.5, 1, 2, 5, 10, 30, 60)
#: Seconds after kopf's last re-listed object before the reactor re-lists (410 Gone, watch restart).
RELIST_DEBOUNCE_S = 0.5


@dataclass
class Reactor:
    """Workers that reconcile experiment keys off :attr:`queue` against :attr:`store`."""

    settings: OperatorSettings
    client: KubeClient
    store: Store = field(default_factory=Store)
    queue: WorkQueue = field(init=False)
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    synced: bool = False
    last_reconcile: float = 0.0
    writes: Writes = field(init=False)
    reads: Reads = field(init=False)
    backoff: Backoff = field(init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _failures: dict[Key, int] = field(default_factory=dict)
    _stalled: set[Key] = field(default_factory=set)
    _relist_timer: asyncio.TimerHandle | None = None
    _oneshots: set[asyncio.Task[None]] = field(default_factory=set)
    logs: LogFollowers = field(init=False)
    reconciler: Reconciler = field(init=False)
    #: Returns the heap a burst freed to the OS once the queue drains (:mod:`spx.controller.memory`).
    trimmer: Trimmer = field(default_factory=Trimmer)
    #: With several replicas (SPX_LEADER_ELECTION): only the Lease holder's workers reconcile.
    leader: LeaderElector | None = None

    def __post_init__(self) -> None:
        self.queue = WorkQueue(on_depth=metrics.set_workqueue_depth, hold_s=self.settings.admission_hold_s)
        self.writes = Writes(self.client, lambda: cond.now_rfc3339(self.clock()))
        self.reads = Reads(self.client, self.store, self.settings.log_limit_bytes)
        self.backoff = Backoff(self.settings.conflict_backoff_s, self.settings.conflict_backoff_max_s)
        self.logs = LogFollowers(self.client, self.settings.log_limit_bytes, self._pod_running, self.clock,
                                 on_gone=self._pod_log_gone)
        self.reconciler = Reconciler(
            settings=self.settings, store=self.store, queue=self.queue, writes=self.writes, reads=self.reads,
            logs=self.logs, backoff=self.backoff, clock=lambda: self.clock(), is_synced=lambda: self.synced,
            wake_queued=self.wake_queued, follow_if_running=self._follow_if_running)

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
        self._relist_soon()

    def _pod_log_gone(self, namespace: str, pod: str, pod_uid: str) -> None:
        """A followed pod's log answered 404 while the store may still hold the pod: it was deleted unseen
        (a watch gap whose re-list delivered nothing, e.g. the namespace's only Job and pod). Re-list now,
        so the decision step sees the pod and its Job gone instead of waiting for ``SPX_RESYNC_SECONDS``."""
        held = self.store.pods.get((namespace, pod))
        if held is not None and str(meta(held).get("uid")) == pod_uid:
            logger.info("pod %s/%s: its log answered 404 but the store still holds it: re-listing", namespace, pod)
            self._relist_soon()

    def _relist_soon(self) -> None:
        """Re-list once, :data:`RELIST_DEBOUNCE_S` after the last call, and reconcile what vanished."""
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
        """Delete the experiments past ``SPX_FINISHED_RETENTION_SECONDS`` (:mod:`spx.controller.decide.retention`);
        only the leader does, and a failed delete is retried at the next re-list."""
        if self.settings.finished_retention_s <= 0 or (self.leader is not None and not self.leader.is_leader):
            return
        for namespace, name in retention.due(self.store.experiments.values(), self.clock(),
                                             self.settings.finished_retention_s):
            try:
                await self.client.delete(resource_path(API_VERSION, PLURAL, namespace, name))
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

    def on_experiment(self, event_type: str | None, obj: dict[str, Any]) -> None:
        gone = event_type == "DELETED"
        self._unstall()
        self._relisted(event_type)
        self.store.put_experiment(obj, deleted=gone)
        if not gone and self.reconciler.own_writes.echo(KIND, obj):
            return
        m = meta(obj)
        new_run = (obj.get("status") or {}).get("observedGeneration") != m.get("generation")
        self.queue.add(Store._key(obj), urgent=new_run and not gone)
        if gone:
            named = self.logs.job_uid(str(m.get("namespace")), str((obj.get("status") or {}).get("jobName")))
            if named is not None:  # its Job was deleted before it (its log was kept for the decision)
                self.logs.forget_job(named)
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
        if not gone and self.reconciler.own_writes.echo("Job", obj):
            return
        key = self.store.experiment_of_job(obj)
        if gone and not self._awaits_decision(key, obj):
            # (a Job deleted mid-run keeps what its pods wrote until the run is decided: the reconciler
            # forgets it then)
            self.logs.forget_job(str(meta(obj).get("uid")))
        if key is not None:
            self.queue.add(key)
        if gone or (job_finished(obj) and (old is None or not job_finished(old))):
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

    def _awaits_decision(self, key: Key | None, job: Mapping[str, Any]) -> bool:
        """``job`` is the run the experiment's status names and that run is not decided yet."""
        exp = self.store.experiments.get(key) if key is not None else None
        st = (exp or {}).get("status") or {}
        return st.get("jobName") == meta(job).get("name") and st.get("phase") not in cond.TERMINAL_PHASES

    def _follow_if_running(self, pod: Mapping[str, Any]) -> None:
        """Follow the log of a bench pod whose container runs (see :mod:`spx.controller.logs`)."""
        st = pod.get("status") or {}
        if st.get("phase") != "Running" or not (pod.get("spec") or {}).get("nodeName"):
            return
        m = meta(pod)
        job_uid = owner_uid(pod, "Job")
        if job_uid and not self.logs.following(str(m.get("uid"))):
            job_key = self.store.job_by_uid.get(job_uid)
            self.logs.follow(str(m.get("namespace")), str(m.get("name")), str(m.get("uid")), job_uid,
                             job_key[1] if job_key else "")

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

    # Admission and the reconcile (spx.controller.reconciler) -------------------------------------------

    def active_keys(self) -> set[Key]:
        """Experiments holding a slot (see :func:`spx.controller.decide.admission.active`)."""
        return self.reconciler.active_keys()

    def _waiting(self) -> list[Key]:
        return admission.waiting(self.store)

    def observed(self, key: Key, **answers: Any) -> dec.Observed | None:
        """The :class:`~spx.controller.decide.conclusion.Observed` of ``key`` from the store (None: no such experiment)."""
        return self.reconciler.observed(key, **answers)

    async def reconcile(self, key: Key) -> str:
        """Decide and act for experiment ``key``; the outcome label of ``spx_reconcile_total``."""
        return await self.reconciler.reconcile(key)
