"""The reconciler: level-based, one writer per experiment.

kopf watches experiments, Jobs and pods; its handlers (:mod:`spx.controller.handlers`) only put the
objects into :class:`Store` (an in-memory mirror, written through on the operator's own writes) and
the owning experiment's key into :class:`WorkQueue`. Workers take keys off the queue — never the same
key twice at once — and :meth:`Reconciler.reconcile` compares the experiment with its Job and pods
and does the next step. Every step is recomputed from the observed state, so a restarted operator
(whose store is refilled by kopf's initial listing) carries on where the last one stopped.

Decisions live in pure modules: validation in :mod:`spx.api`, manifests in
:mod:`spx.runner.kubernetes`, run classification in :mod:`spx.controller.pod_outcome`, result
reading in :mod:`spx.controller.results`, statuses in :mod:`spx.controller.conditions`, verdicts in
:mod:`spx.analysis`.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from spx import metrics
from spx.api.accuracy import AccuracyStatus
from spx.api.loading import SpecError, validate_spec
from spx.api.serving import ServingStatus
from spx.api.spec import API_VERSION, GROUP, KIND, PLURAL, VERSION, ExperimentSpec
from spx.api.status import Environment, ExperimentStatus, KernelStatus
from spx.controller import conditions as cond
from spx.controller.config import OperatorConfig
from spx.controller.kube import ApiError, KubeClient, resource_path
from spx.controller.pod_outcome import Observation, observe, termination_message
from spx.controller.results import collect, measurement, vllm_statuses
from spx.runner.kubernetes import (
    CONTAINER_NAME,
    LABEL_EXPERIMENT_UID,
    LABEL_GENERATION,
    build_job,
    build_result_configmap,
    job_name,
    result_configmap_name,
)

logger = logging.getLogger("spx.controller")

Key = tuple[str, str]  # (namespace, experiment name)
EXPERIMENT_API = f"{GROUP}/{VERSION}"
BACKOFF_S = (0.5, 1, 2, 5, 10, 30, 60)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _rv(obj: Mapping[str, Any]) -> int | None:
    try:
        return int(str(_meta(obj).get("resourceVersion")))
    except ValueError:
        return None


def _generation(obj: Mapping[str, Any]) -> int:
    """``metadata.generation`` (1 when the API server has not set it yet)."""
    return int(_meta(obj).get("generation") or 1)


def _owner_uid(obj: Mapping[str, Any], kind: str) -> str | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller", True):
            return str(ref.get("uid"))
    return None


def _finished(job: Mapping[str, Any]) -> bool:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return True
    return False


def _timeout(exp: Mapping[str, Any]) -> int | None:
    """The experiment's ``spec.timeoutSeconds`` (its Job deadline) for the metrics; None when not a number."""
    raw = (exp.get("spec") or {}).get("timeoutSeconds", ExperimentSpec.model_fields["timeout_seconds"].default)
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


class Store:
    """In-memory mirror of experiments, their Jobs and those Jobs' pods (from kopf's watches)."""

    def __init__(self) -> None:
        self.experiments: dict[Key, dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._jobs_by_owner: dict[str, set[tuple[str, str]]] = {}
        self._pods_by_owner: dict[str, set[tuple[str, str]]] = {}
        self.uid_to_key: dict[str, Key] = {}
        self.job_by_uid: dict[str, tuple[str, str]] = {}

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = _meta(obj)
        return str(meta.get("namespace") or ""), str(meta.get("name") or "")

    @staticmethod
    def _is_newer(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
        if old is None:
            return True
        a, b = _rv(old), _rv(new)
        return a is None or b is None or b >= a

    def _put(self, table: dict[tuple[str, str], dict[str, Any]], index: dict[str, set[tuple[str, str]]],
             owner_kind: str, obj: dict[str, Any], deleted: bool) -> bool:
        key = self._key(obj)
        old = table.get(key)
        if deleted:
            if old is not None and _meta(old).get("uid") not in (None, _meta(obj).get("uid")):
                return False  # a newer incarnation replaced it already
            table.pop(key, None)
            owner = _owner_uid(old or obj, owner_kind)
            if owner and owner in index:
                index[owner].discard(key)
                if not index[owner]:
                    del index[owner]
            return True
        if not self._is_newer(old, obj) and _meta(old or {}).get("uid") == _meta(obj).get("uid"):
            return False
        table[key] = obj
        owner = _owner_uid(obj, owner_kind)
        if owner:
            index.setdefault(owner, set()).add(key)
        return True

    def put_experiment(self, obj: dict[str, Any], deleted: bool = False) -> bool:
        key = self._key(obj)
        old = self.experiments.get(key)
        if deleted:
            if old is not None and _meta(old).get("uid") != _meta(obj).get("uid"):
                return False
            self.experiments.pop(key, None)
            self.uid_to_key.pop(str(_meta(obj).get("uid")), None)
            return True
        if old is not None and _meta(old).get("uid") == _meta(obj).get("uid") and not self._is_newer(old, obj):
            return False
        if old is not None and _meta(old).get("uid") != _meta(obj).get("uid"):
            self.uid_to_key.pop(str(_meta(old).get("uid")), None)
        self.experiments[key] = obj
        self.uid_to_key[str(_meta(obj).get("uid"))] = key
        return True

    def put_job(self, obj: dict[str, Any], deleted: bool = False) -> bool:
        changed = self._put(self.jobs, self._jobs_by_owner, KIND, obj, deleted)
        uid = str(_meta(obj).get("uid"))
        if changed and deleted:
            self.job_by_uid.pop(uid, None)
        elif changed:
            self.job_by_uid[uid] = self._key(obj)
        return changed

    def put_pod(self, obj: dict[str, Any], deleted: bool = False) -> bool:
        return self._put(self.pods, self._pods_by_owner, "Job", obj, deleted)

    def jobs_of(self, experiment_uid: str) -> list[dict[str, Any]]:
        return [self.jobs[k] for k in sorted(self._jobs_by_owner.get(experiment_uid, ())) if k in self.jobs]

    def pods_of(self, job_uid: str) -> list[dict[str, Any]]:
        return [self.pods[k] for k in sorted(self._pods_by_owner.get(job_uid, ())) if k in self.pods]

    def experiment_of_job(self, job: Mapping[str, Any]) -> Key | None:
        owner = _owner_uid(job, KIND)
        return self.uid_to_key.get(owner) if owner else None

    def experiment_of_pod(self, pod: Mapping[str, Any]) -> Key | None:
        owner = _owner_uid(pod, "Job")
        job_key = self.job_by_uid.get(owner) if owner else None
        job = self.jobs.get(job_key) if job_key else None
        return self.experiment_of_job(job) if job is not None else None


class WorkQueue:
    """Deduplicating two-level work queue: a key is queued at most once and processed by one worker
    at a time.

    A key added while it is being processed is processed again right after. ``urgent`` keys (new
    experiments and new generations, which wait for a Job) go before the rest (progress of runs
    already started), so a burst of applies is admitted before the follow-up work. ``add_after``
    schedules a key (the earliest pending time wins).
    """

    def __init__(self) -> None:
        self._urgent: collections.deque[Key] = collections.deque()
        self._normal: collections.deque[Key] = collections.deque()
        self._available = asyncio.Semaphore(0)
        self._queued: dict[Key, bool] = {}  # key → urgent
        self._active: set[Key] = set()
        self._dirty: dict[Key, bool] = {}
        self._timers: dict[Key, tuple[float, asyncio.TimerHandle]] = {}

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: Key, urgent: bool = False) -> None:
        if key in self._active:
            self._dirty[key] = self._dirty.get(key, False) or urgent
            return
        queued = self._queued.get(key)
        if queued is not None and (queued or not urgent):
            return
        self._queued[key] = urgent
        (self._urgent if urgent else self._normal).append(key)
        self._available.release()

    def add_after(self, key: Key, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        current = self._timers.get(key)
        if current is not None:
            if current[0] <= when:
                return
            current[1].cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self.add(key)

        self._timers[key] = (when, loop.call_at(when, fire))

    async def get(self) -> Key:
        while True:
            await self._available.acquire()
            key = self._urgent.popleft() if self._urgent else self._normal.popleft()
            if key in self._queued and key not in self._active:  # else: a stale entry of a promoted key
                del self._queued[key]
                self._active.add(key)
                return key

    def done(self, key: Key) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self.add(key, self._dirty.pop(key))

    def close(self) -> None:
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()


class Requeue(Exception):
    """Reconcile again after ``delay`` seconds (not an error)."""

    def __init__(self, delay: float = 0.0, why: str = "") -> None:
        self.delay = delay
        super().__init__(why)


@dataclass
class Analysis:
    """The functions of :mod:`spx.analysis` the reconciler uses (injected for tests)."""

    evaluate: Callable[..., Any]
    points_from_result: Callable[..., Any]
    point_from_result: Callable[..., Any]
    summarize_serving: Callable[..., Any]
    summarize_accuracy: Callable[..., Any]
    combine_verdict: Callable[..., Any]

    @classmethod
    def load(cls) -> Analysis:
        from spx.analysis import combine_verdict, evaluate, points_from_result
        from spx.analysis.accuracy import summarize as summarize_accuracy
        from spx.analysis.serving import summarize as summarize_serving
        from spx.analysis.summary import point_from_result

        return cls(evaluate=evaluate, points_from_result=points_from_result, point_from_result=point_from_result,
                   summarize_serving=summarize_serving, summarize_accuracy=summarize_accuracy,
                   combine_verdict=combine_verdict)


@dataclass
class Reconciler:
    """Workers that take experiment keys off :attr:`queue` and reconcile them against :attr:`store`."""

    config: OperatorConfig
    client: KubeClient
    store: Store = field(default_factory=Store)
    queue: WorkQueue = field(default_factory=WorkQueue)
    analysis: Analysis | None = None
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _reserved: set[Key] = field(default_factory=set)
    _failures: dict[Key, int] = field(default_factory=dict)
    _own_writes: set[tuple[str, str, str, str]] = field(default_factory=set)
    _background: set[asyncio.Task[None]] = field(default_factory=set)
    _synced_jobs: set[str] = field(default_factory=set)
    _specs: dict[tuple[str, int], ExperimentSpec | SpecError] = field(default_factory=dict)
    last_reconcile: float = 0.0

    # Lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        for i in range(self.config.workers):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"spx-reconcile-{i}"))
        self._tasks.append(asyncio.create_task(self._resync(), name="spx-resync"))

    async def stop(self) -> None:
        if self._background:
            await asyncio.wait(list(self._background), timeout=5)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        self.queue.close()
        await self.client.close()

    def dead_tasks(self) -> list[str]:
        """Names of the reconciler's background tasks that have ended (they never should)."""
        return [t.get_name() for t in self._tasks if t.done()]

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.config.resync_s * (0.9 + 0.2 * random.random()))
            for key in list(self.store.experiments):
                self.queue.add(key)

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                outcome = await self.reconcile(key)
                self._failures.pop(key, None)
                metrics.count_reconcile("experiment", outcome)
            except Requeue as rq:
                metrics.count_reconcile("experiment", "requeued")
                self.queue.add_after(key, rq.delay)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                n = self._failures.get(key, 0)
                self._failures[key] = n + 1
                delay = BACKOFF_S[min(n, len(BACKOFF_S) - 1)]
                metrics.count_error("experiment")
                logger.warning("reconcile of %s/%s failed (retry in %ss): %s", key[0], key[1], delay, err,
                               exc_info=not isinstance(err, ApiError))
                self.queue.add_after(key, delay)
            finally:
                self.last_reconcile = time.time()
                self.queue.done(key)

    # Events from kopf --------------------------------------------------------------------------------

    def _echo(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """Is this watch event the echo of the operator's own write (nothing new to react to)?"""
        meta = _meta(obj)
        mark = (kind, str(meta.get("namespace")), str(meta.get("name")), str(meta.get("resourceVersion")))
        if mark in self._own_writes:
            self._own_writes.discard(mark)
            return True
        return False

    def _wrote(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = _meta(obj)
        if len(self._own_writes) > 100_000:  # echoes lost to a watch reconnect: forget them
            self._own_writes.clear()
        self._own_writes.add((kind, str(meta.get("namespace")), str(meta.get("name")), str(meta.get("resourceVersion"))))

    def on_experiment(self, event_type: str | None, obj: dict[str, Any]) -> None:
        deleted = event_type == "DELETED"
        self.store.put_experiment(obj, deleted=deleted)
        if not deleted and self._echo(KIND, obj):
            return
        key = Store._key(obj)
        meta = _meta(obj)
        new_run = (obj.get("status") or {}).get("observedGeneration") != meta.get("generation")
        self.queue.add(key, urgent=new_run and not deleted)
        if deleted:
            for job in self.store.jobs_of(str(meta.get("uid"))):  # garbage-collected with it
                for pod in self.store.pods_of(str(_meta(job).get("uid"))):
                    self.store.put_pod(pod, deleted=True)
                self.store.put_job(job, deleted=True)
                self._synced_jobs.discard(str(_meta(job).get("uid")))
            self.wake_queued()

    def on_job(self, event_type: str | None, obj: dict[str, Any]) -> None:
        deleted = event_type == "DELETED"
        old = self.store.jobs.get(Store._key(obj))
        self.store.put_job(obj, deleted=deleted)
        if deleted:
            self._synced_jobs.discard(str(_meta(obj).get("uid")))
        elif self._echo("Job", obj):
            return
        key = self.store.experiment_of_job(obj)
        if key is not None:
            self.queue.add(key)
        if deleted or (_finished(obj) and (old is None or not _finished(old))):
            self.wake_queued()

    def on_pod(self, event_type: str | None, obj: dict[str, Any]) -> None:
        self.store.put_pod(obj, deleted=event_type == "DELETED")
        key = self.store.experiment_of_pod(obj)
        if key is not None:
            self.queue.add(key)

    def wake_queued(self) -> None:
        """A slot may have freed up: look at the experiments waiting for one."""
        if self.config.max_concurrent <= 0:
            return
        for key in self._waiting():
            self.queue.add(key)

    # Admission ---------------------------------------------------------------------------------------

    def active_keys(self) -> set[Key]:
        """Experiments holding a slot: an unfinished Job of their current generation, or a reservation."""
        active = set(self._reserved)
        for job in self.store.jobs.values():
            if _finished(job) or _deleting(job):
                continue
            key = self.store.experiment_of_job(job)
            if key is None:
                continue
            exp = self.store.experiments.get(key)
            gen = str(_generation(exp or {}))
            if (_meta(job).get("labels") or {}).get(LABEL_GENERATION) == gen:
                active.add(key)
        return active

    def _waiting(self) -> list[Key]:
        """Experiments the operator queued, oldest first (FIFO admission)."""
        rows = []
        for key, exp in self.store.experiments.items():
            st = exp.get("status") or {}
            if st.get("phase") == "Queued" and not st.get("jobName") and st.get("observedGeneration") == _meta(exp).get("generation"):
                rows.append((str(_meta(exp).get("creationTimestamp") or ""), key))
        return [k for _, k in sorted(rows)]

    def admit(self, key: Key) -> tuple[bool, int]:
        """Reserve a slot for ``key`` if the concurrency limit allows it (FIFO among the queued)."""
        limit = self.config.max_concurrent
        if limit <= 0:
            self._reserved.add(key)
            return True, 0
        active = self.active_keys()
        if key in active:
            return True, len(active)
        free = limit - len(active)
        if free <= 0:
            return False, len(active)
        waiting = [k for k in self._waiting() if k not in active]
        if key not in waiting:
            waiting.append(key)
        if waiting.index(key) < free:
            self._reserved.add(key)
            return True, len(active)
        return False, len(active)

    # The reconcile -----------------------------------------------------------------------------------

    async def reconcile(self, key: Key) -> str:
        """Do the next step for experiment ``key``; the outcome label of ``spx_reconcile_total``.

        Raises :class:`Requeue` to be called again after a delay, :class:`ApiError` on API failures
        (the worker retries with :data:`BACKOFF_S`).
        """
        exp = self.store.experiments.get(key)
        if exp is None:
            metrics.forget_experiment(*key)
            self._reserved.discard(key)
            return "deleted"
        meta = _meta(exp)
        if _deleting(exp):
            return "deleting"
        namespace, name = key
        generation = _generation(exp)
        uid = str(meta.get("uid"))
        now = self.clock()
        nows = cond.now_rfc3339(now)
        try:
            status = ExperimentStatus.model_validate(exp.get("status") or {})
        except ValidationError:
            status = ExperimentStatus()
        jname = job_name(name, generation)
        jobs = self.store.jobs_of(uid)

        # Admission: an invalid spec never reaches a GPU.
        try:
            spec = self._spec(uid, generation, exp.get("spec"), f"{namespace}/{name}")
        except SpecError as err:
            await self._delete_jobs(exp, [j for j in jobs if not _deleting(j)], "the spec is invalid")
            if status.observed_generation == generation and cond.decided_reason(status) == "InvalidSpec":
                metrics.observe_experiment(namespace, name, exp.get("status"), timeout_seconds=_timeout(exp))
                return "invalid"
            new = cond.new_run(status, generation, nows)
            new = cond.apply_step(new, cond.invalid_spec(err.problems), nows, generation)
            new = new.model_copy(update={"completion_time": nows})
            await self._write_status(exp, new, events=[("Warning", "InvalidSpec", new.message or "")])
            self.wake_queued()
            return "invalid"

        # A new generation supersedes older runs: stop their Jobs.
        stale = [j for j in jobs if _meta(j).get("name") != jname and not _deleting(j)]
        if stale:
            await self._delete_jobs(exp, stale, f"superseded by generation {generation}")
        job = next((j for j in jobs if _meta(j).get("name") == jname), None)
        if job is not None and _deleting(job):
            raise Requeue(1.0, "the Job of this generation is being deleted")

        if status.observed_generation != generation:
            status = cond.new_run(status, generation, nows)

        if cond.is_terminal(status):
            if job is not None and not _finished(job):
                await self._delete_jobs(exp, [job], "the run was stopped by the operator")
            self._reserved.discard(key)
            metrics.observe_experiment(namespace, name, exp.get("status"), self._phase_since(status), _timeout(exp))
            return "terminal"

        if job is None:
            return await self._start_run(exp, spec, status, jname, now)
        self._reserved.discard(key)
        job_uid = str(_meta(job).get("uid"))
        if job_uid not in self._synced_jobs:
            await self._sync_pods(namespace, uid, job_uid)
        pods = self.store.pods_of(job_uid)
        obs = observe(job, pods, now, self.config.timeouts)
        if obs.reason == "PodCreateFailed":
            failed_create = await self._failed_create_message(namespace, job)
            if failed_create:
                obs = observe(job, pods, now, self.config.timeouts, failed_create=failed_create)
        return await self._follow_run(exp, spec, status, job, obs, now)

    def _spec(self, uid: str, generation: int, raw: Any, source: str) -> ExperimentSpec:
        """The validated spec of one generation (validated once; a generation's spec never changes)."""
        key = (uid, generation)
        cached = self._specs.get(key)
        if cached is None:
            try:
                cached = validate_spec(raw, source=source)
            except SpecError as err:
                cached = err
            if len(self._specs) > 10_000:
                self._specs.clear()
            self._specs[key] = cached
        if isinstance(cached, SpecError):
            raise cached
        return cached

    async def _sync_pods(self, namespace: str, experiment_uid: str, job_uid: str) -> None:
        """List a Job's pods from the API server once (the watch may not have delivered them yet)."""
        items = (await self.client.get(resource_path("v1", "pods", namespace),
                                       params={"labelSelector": f"{LABEL_EXPERIMENT_UID}={experiment_uid}"})).get("items") or []
        for pod in items:
            pod.setdefault("apiVersion", "v1")
            pod.setdefault("kind", "Pod")
            self.store.put_pod(pod)
        self._synced_jobs.add(job_uid)

    async def _start_run(self, exp: dict[str, Any], spec: ExperimentSpec, status: ExperimentStatus, jname: str,
                         now: dt.datetime) -> str:
        key = Store._key(exp)
        namespace, name = key
        meta = _meta(exp)
        generation = _generation(exp)
        nows = cond.now_rfc3339(now)
        if status.job_name == jname and status.phase in ("Pending", "Running", "Analyzing", "Queued"):
            # Status says we created this Job; the store has none. Ask the API server before concluding.
            try:
                found = await self.client.get(resource_path("batch/v1", "jobs", namespace, jname))
            except ApiError as err:
                if not err.not_found:
                    raise
                found = None
            if found is not None and _owner_uid(found, KIND) == meta.get("uid"):
                self.store.put_job(found)
                raise Requeue(0, "the Job was missing from the store")
            # It is gone before it finished.
            new = cond.apply_step(status, cond.failed(
                "InfraFailed", f"Job {jname} was deleted before it finished", "JobDeleted"), nows, generation)
            new = new.model_copy(update={"completion_time": nows})
            await self._write_status(exp, new, events=[("Warning", "InfraFailed", new.message or "")])
            self._observe_duration(new, now)
            self.wake_queued()
            return "job-vanished"

        admitted, active = self.admit(key)
        if not admitted:
            new = cond.apply_step(status, cond.queued(active, self.config.max_concurrent), nows, generation)
            # The message carries the live slot count; rewrite it only when entering the queue.
            if status.phase == "Queued" and status.observed_generation == generation:
                new = new.model_copy(update={"message": status.message, "conditions": status.conditions})
            await self._write_status(exp, new, events=[("Normal", "Queued", new.message or "")] if status.phase != "Queued" else [])
            return "queued"

        try:
            manifest = build_job(
                name, namespace, str(meta.get("uid")), generation, spec,
                spec.image or self.config.bench_image,
                command=self.config.bench_command,
                service_account_name=self.config.bench_service_account,
                shm_size=self.config.bench_shm_size,
                image_pull_policy=self.config.bench_image_pull_policy,
                extra_env=self.config.extra_env,
            )
            path = resource_path("batch/v1", "jobs", namespace)
            try:
                job = await self.client.create(path, manifest)
            except ApiError as err:
                if err.code in (400, 403, 422):
                    return await self._job_refused(exp, status, jname, err, nows, generation)
                if not err.exists:
                    raise
                job = await self.client.get(resource_path("batch/v1", "jobs", namespace, jname))
                owner = _owner_uid(job, KIND)
                if owner != meta.get("uid"):
                    if _deleting(job) or owner not in self.store.uid_to_key:
                        raise Requeue(2.0, f"Job {jname} of a previous incarnation is being removed") from None
                    new = cond.apply_step(status, cond.failed(
                        "InfraFailed", f"a Job named {jname} exists and is not owned by this experiment", "JobConflict"),
                        nows, generation)
                    await self._write_status(exp, new.model_copy(update={"completion_time": nows}),
                                             events=[("Warning", "InfraFailed", new.message or "")])
                    return "job-conflict"
                logger.info("Job %s/%s already exists and is ours; adopting it", namespace, jname)
            self.store.put_job(job)
            self._wrote("Job", job)
            self._synced_jobs.add(str(_meta(job).get("uid")))
        finally:
            self._reserved.discard(key)

        step = (cond.suspended(jname, spec.scheduling.queue_name) if (job.get("spec") or {}).get("suspend")
                else cond.job_pending(jname))
        new = cond.apply_step(status, step, nows, generation)
        new = new.model_copy(update={"job_name": jname, "start_time": status.start_time or nows,
                                     "result_config_map": None})
        await self._write_status(exp, new)  # (the Job controller posts the Job's own events)
        return "job-created"

    async def _failed_create_message(self, namespace: str, job: Mapping[str, Any]) -> str | None:
        """The message of the Job's latest ``FailedCreate`` event (why the Job controller made no pod)."""
        uid = _meta(job).get("uid")
        try:
            items = (await self.client.get(resource_path("v1", "events", namespace), params={
                "fieldSelector": f"involvedObject.uid={uid},reason=FailedCreate"})).get("items") or []
        except (TimeoutError, ApiError, OSError) as err:
            logger.info("could not list the events of Job %s/%s: %s", namespace, _meta(job).get("name"), err)
            return None
        items = [e for e in items if e.get("reason") == "FailedCreate"
                 and (e.get("involvedObject") or {}).get("uid") == uid]
        if not items:
            return None

        def when(e: Mapping[str, Any]) -> str:
            return str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
                       or _meta(e).get("creationTimestamp") or "")

        latest = max(items, key=when)
        return f"FailedCreate: {latest.get('message') or latest.get('note') or ''}".rstrip(": ")

    async def _job_refused(self, exp: dict[str, Any], status: ExperimentStatus, jname: str, err: ApiError,
                           nows: str, generation: int) -> str:
        """The API server rejected the Job for good: decide the run instead of retrying forever.

        400/422 (the Job is invalid, e.g. a field the spec produced) → ``InvalidSpec``; 403 (quota,
        Pod Security admission, a webhook, RBAC) → ``InfraFailed``. Other codes are retried.
        """
        detail = err.message or err.reason or f"HTTP {err.code}"
        if err.code == 403:
            step = cond.failed("InfraFailed", f"the API server refused the Job {jname}: {detail}", "JobRejected",
                               scheduled=("False", "JobRejected", "not scheduled: the API server refused the Job"))
        else:
            step = cond.failed("InvalidSpec", f"the API server rejected the Job {jname} as invalid: {detail}", "NotRun",
                               "the run was not started: the API server rejected the Job",
                               scheduled=("False", "InvalidSpec", "not scheduled: the Job is invalid"))
        logger.warning("the API server refused Job %s/%s (HTTP %s): %s",
                       _meta(exp).get("namespace"), jname, err.code, detail)
        new = cond.apply_step(status, step, nows, generation)
        new = new.model_copy(update={"completion_time": nows})
        reason = step.decided[1] if step.decided else "InfraFailed"
        await self._write_status(exp, new, events=[("Warning", reason, new.message or "")])
        self.wake_queued()
        return "job-rejected"

    async def _follow_run(self, exp: dict[str, Any], spec: ExperimentSpec, status: ExperimentStatus,
                          job: dict[str, Any], obs: Observation, now: dt.datetime) -> str:
        key = Store._key(exp)
        generation = _generation(exp)
        nows = cond.now_rfc3339(now)
        jname = str(_meta(job).get("name"))
        base = status.model_copy(update={"job_name": jname, "start_time": status.start_time or nows})
        if obs.recheck_after_s is not None:
            self.queue.add_after(key, obs.recheck_after_s + 0.2)
        if obs.state == "suspended":
            await self._write_status(exp, cond.apply_step(base, cond.suspended(jname, spec.scheduling.queue_name), nows, generation))
            return "suspended"
        if obs.state == "pending":
            await self._write_status(exp, cond.apply_step(base, cond.job_pending(jname, obs.message), nows, generation))
            return "pending"
        if obs.state == "unschedulable":
            await self._write_status(exp, cond.apply_step(base, cond.unschedulable_waiting(jname, obs.message), nows, generation))
            return "unschedulable"
        if obs.state in ("scheduled", "running"):
            step = cond.running(jname, obs.node, started=obs.state == "running",
                                detail="" if obs.state == "running" or obs.reason == "PodScheduled" else obs.message)
            await self._write_status(exp, cond.apply_step(base, step, nows, generation),
                                     events=[("Normal", "Running", step.message)] if status.phase != "Running" else [])
            return obs.state
        return await self._finish_run(exp, spec, base, job, obs, now)

    async def _read_log(self, namespace: str, pod: str) -> str | None:
        limit = self.config.log_limit_bytes
        try:
            text: str = await self.client.pod_log(namespace, pod, CONTAINER_NAME, limit)
        except ApiError as err:
            logger.info("could not read the log of pod %s/%s: %s", namespace, pod, err)
            return None
        if len(text.encode()) >= limit:
            # The result line is the last one: fetch the tail too.
            try:
                tail: str = await self.client.request(
                    "GET", resource_path("v1", "pods", namespace, pod, "log"),
                    params={"container": CONTAINER_NAME, "tailLines": "20"}, text=True)
                text = text + "\n" + tail
            except ApiError:
                pass
        return text

    async def _finish_run(self, exp: dict[str, Any], spec: ExperimentSpec, status: ExperimentStatus,
                          job: dict[str, Any], obs: Observation, now: dt.datetime) -> str:
        key = Store._key(exp)
        namespace, name = key
        meta = _meta(exp)
        uid = str(meta.get("uid"))
        generation = _generation(exp)
        nows = cond.now_rfc3339(now)
        jname = str(_meta(job).get("name"))
        completed_reason = obs.reason if obs.state == "failed" else "JobSucceeded"

        if status.phase != "Analyzing":
            analyzing = cond.apply_step(status, cond.analyzing(jname, completed_reason, obs.message), nows, generation)
            exp = await self._write_status(exp, analyzing)
            status = analyzing

        pod = obs.pod
        pod_name = str(_meta(pod).get("name")) if pod else None
        message = termination_message(pod) if pod else None
        log = await self._read_log(namespace, pod_name) if pod_name else None
        collected = collect(message, log)
        analysis = self.analysis or Analysis.load()
        self.analysis = analysis
        try:
            meas = measurement(collected, analysis.points_from_result)
        except Exception as err:  # the analysis' own conversion failed: keep going, say why
            collected.problems.append(f"could not convert the result's points: {err}")
            meas = None

        serving, accuracy = None, None
        if spec.serving is not None:
            serving, accuracy = vllm_statuses(collected, analysis.summarize_serving, analysis.summarize_accuracy)
            if serving is None and spec.serving.points and obs.state == "succeeded":
                collected.problems.append("the serving A/B left no result (no serving line in the log, none in the summary)")
            if accuracy is None and spec.accuracy is not None and obs.state == "succeeded":
                collected.problems.append("GSM8K left no result (no accuracy line in the log, none in the summary)")

        cm_name = result_configmap_name(name, generation)
        configmap = build_result_configmap(
            name, namespace, uid, generation,
            result=collected.result.to_wire() if collected.result is not None else None,
            termination_message=message, log=log, problems=collected.problems, pod_name=pod_name,
            serving_result=collected.serving_result.to_wire() if collected.serving_result is not None else None,
            accuracy_result=collected.accuracy_result.to_wire() if collected.accuracy_result is not None else None,
        )
        await self._store_configmap(namespace, configmap)

        environment: Environment | None = None
        if meas is not None:
            environment = meas.environment
            if environment.node is None and obs.node:
                environment = environment.model_copy(update={"node": obs.node})
        update: dict[str, Any] = {"completion_time": nows, "result_config_map": cm_name, "environment": environment,
                                  "serving": serving, "accuracy": accuracy}
        problems = "; ".join(collected.problems)
        events: list[tuple[str, str, str]] = []

        if obs.state == "succeeded" and meas is not None and meas.complete and meas.points:
            evaluation = analysis.evaluate(
                meas.points, spec.gate, meas.gather_source, spec.parallelism.tensor_parallel_size,
                gemm_backend=meas.gemm_backend, timer=meas.timer,
                device=meas.environment.device if meas.environment else None,
            )
            verdict, reasons = evaluation.verdict, list(evaluation.reasons)
            if spec.serving is not None:
                # The serving A/B and GSM8K gates count too; a section the run should have produced
                # and did not is undecided, never a silent pass.
                if serving is None and spec.serving.points:
                    serving = ServingStatus(reasons=["the serving A/B left no result"])
                if accuracy is None and spec.accuracy is not None:
                    accuracy = AccuracyStatus(reasons=["GSM8K: the run left no result"],
                                              max_drop_points=spec.accuracy.max_drop_points)
                update.update(serving=serving, accuracy=accuracy)
                verdict, reasons = analysis.combine_verdict(verdict, reasons, serving, accuracy)
            new = cond.with_kernel(status, evaluation.kernel, verdict, reasons)
            new = cond.apply_step(new, cond.decided(verdict, reasons, "JobSucceeded",
                                                    obs.message, cond.ran_on(obs.node)), nows, generation)
            events.append(("Normal" if verdict == "Pass" else "Warning", f"Verdict{verdict}", new.message or ""))
            outcome = f"verdict-{verdict}"
        else:
            if obs.state == "succeeded":
                reason: str = "BenchmarkFailed"
                if meas is None:
                    msg = f"the bench exited 0 but left no usable result: {problems}"
                elif not meas.complete:
                    msg = f"the bench reported an incomplete run: {meas.error or 'no error given'}"
                else:
                    msg = "the bench's result has no points"
            else:
                reason = obs.outcome or "InfraFailed"
                msg = obs.message
                if meas is not None and meas.error:
                    msg += f"; the bench reported: {meas.error}"
                if meas is None and collected.problems and obs.outcome == "BenchmarkFailed":
                    msg += f"; result: {problems}"
                vllm_note = (serving.failures[0] if serving is not None and serving.failures
                             else accuracy.reasons[0] if accuracy is not None and accuracy.gate_passed is None
                             and accuracy.reasons else None)
                if vllm_note:  # e.g. the vLLM benches could not start
                    msg += f"; {vllm_note}"
            kernel = None
            if meas is not None and meas.points:
                kernel = KernelStatus(points=meas.points, gather_source=meas.gather_source,  # type: ignore[arg-type]
                                      gemm_backend=meas.gemm_backend, timer=meas.timer)
            elif collected.partial_points:  # the points the bench printed before it died
                by_tokens = {p.tokens: p for p in collected.partial_points}
                kernel = KernelStatus(points=[analysis.point_from_result(by_tokens[t]) for t in sorted(by_tokens)],
                                      gather_source=collected.partial_points[-1].gather_source)
            new = cond.with_kernel(status, kernel, None, [])
            new = cond.apply_step(new, cond.failed(reason, msg, completed_reason, obs.message,  # type: ignore[arg-type]
                                                   scheduled=cond.ran_on(obs.node)), nows, generation)
            events.append(("Warning", reason, msg))
            outcome = reason
        new = new.model_copy(update=update)
        await self._write_status(exp, new, events=events)
        self._observe_duration(new, now)
        if obs.abort:
            await self._delete_jobs(exp, [job], f"gave up: {obs.reason}")
        self.wake_queued()
        return outcome

    @staticmethod
    def _observe_duration(status: ExperimentStatus, now: dt.datetime) -> None:
        """Count a run that just reached a terminal phase from its Job in ``spx_experiment_duration_seconds``.

        Called right after the terminal status was written, never for a status that was already
        terminal (a restarted operator replays those without observing them again), so each run
        is observed at most once; ``startTime`` is when the run's Job was created.
        """
        started = cond.parse_time(status.start_time)
        if started is not None:
            metrics.observe_duration((now - started).total_seconds())

    # Writes -----------------------------------------------------------------------------------------

    def _phase_since(self, status: ExperimentStatus) -> float | None:
        if status.phase in cond.TERMINAL_PHASES:
            t = cond.parse_time(status.completion_time)
            return t.timestamp() if t else None
        return None

    async def _write_status(self, exp: dict[str, Any], status: ExperimentStatus,
                            events: list[tuple[str, str, str]] | None = None) -> dict[str, Any]:
        """Replace ``.status`` if it changed, guarded by a ``resourceVersion`` test; post events after."""
        namespace, name = Store._key(exp)
        wire = status.to_wire()
        if wire == (exp.get("status") or {}):
            metrics.observe_experiment(namespace, name, wire, self._phase_since(status), _timeout(exp))
            return exp
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": _meta(exp).get("resourceVersion")},
            {"op": "add", "path": "/status", "value": wire},
        ]
        path = resource_path(EXPERIMENT_API, PLURAL, namespace, name, "status")
        try:
            updated = await self.client.json_patch(path, ops)
        except ApiError as err:
            if err.not_found:
                self.store.put_experiment(exp, deleted=True)
                raise Requeue(0, "the experiment is gone") from None
            if err.conflict:
                fresh = await self.client.get(resource_path(EXPERIMENT_API, PLURAL, namespace, name))
                self.store.put_experiment(fresh)
                raise Requeue(0, "the experiment changed; recomputing") from None
            raise
        self.store.put_experiment(updated)
        self._wrote(KIND, updated)
        old_phase = (exp.get("status") or {}).get("phase")
        if old_phase != status.phase:
            logger.info("%s/%s: %s → %s: %s", namespace, name, old_phase or "new", status.phase, status.message or "",
                        extra={"experiment": name, "namespace": namespace, "phase": status.phase})
        metrics.observe_experiment(namespace, name, updated.get("status"), self._phase_since(status), _timeout(updated))
        for type_, reason, message in events or []:
            self.post_event_soon(updated, type_, reason, message)
        return updated

    async def _store_configmap(self, namespace: str, manifest: dict[str, Any]) -> None:
        path = resource_path("v1", "configmaps", namespace)
        try:
            await self.client.create(path, manifest)
        except ApiError as err:
            if not err.exists:
                raise
            # Written by an earlier attempt of the same run (e.g. before a restart): refresh it.
            name = manifest["metadata"]["name"]
            patch = {"data": manifest.get("data"), "binaryData": manifest.get("binaryData")}
            await self.client.merge_patch(resource_path("v1", "configmaps", namespace, name), patch)

    async def _delete_jobs(self, exp: Mapping[str, Any], jobs: list[dict[str, Any]], why: str) -> None:
        for job in jobs:
            namespace, jname = Store._key(job)
            try:
                await self.client.delete(resource_path("batch/v1", "jobs", namespace, jname), propagation="Background")
            except ApiError as err:
                if not err.not_found:
                    raise
            self.store.put_job(job, deleted=True)
            self.post_event_soon(exp, "Normal", "JobDeleted", f"deleted Job {jname}: {why}")
        if jobs:
            self.wake_queued()

    def post_event_soon(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Post an event in the background: the reconcile does not wait for it."""
        task = asyncio.get_running_loop().create_task(self.post_event(obj, type_, reason, message))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def post_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Post a core/v1 Event about the experiment; failures are logged, never raised."""
        meta = _meta(obj)
        namespace = str(meta.get("namespace") or "default")
        stamp = cond.now_rfc3339(self.clock())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": API_VERSION, "kind": KIND, "name": meta.get("name"), "namespace": namespace,
                "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "spx-operator"},
            "reportingComponent": "spx-operator",
            "reportingInstance": "spx-operator",
            "action": reason,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self.client.create(resource_path("v1", "events", namespace), body)
        except (TimeoutError, ApiError, OSError) as err:
            logger.warning("could not post event %s for %s/%s: %s", reason, namespace, meta.get("name"), err)
