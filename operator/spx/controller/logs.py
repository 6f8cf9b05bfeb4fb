"""Follow the bench pods' logs while they run, so nothing the bench wrote is lost with the pod.

The Job controller deletes a Job's pods at its deadline, an eviction deletes the pod, a lost node
takes its kubelet along: a log read after the fact can find nothing (404). So the reactor follows the
log stream of every running bench pod (``GET pods/{name}/log?follow=true``, the API server proxying
the kubelet's stream) from the moment it runs, and keeps every line it received — the points and
the partial summary the bench writes up to its exit, its SIGTERM grace period included. The kept
text is what :class:`~spx.controller.decide.decision.Results` calls ``progress_log``.

Bounded: at most ``limit_bytes`` are kept per pod (the head, then the newest lines, where the
result is); a stream that breaks while the pod still runs is re-opened (from the start: the kubelet
serves the whole log again) at most :data:`MAX_RECONNECTS` times; :meth:`LogFollowers.settle` waits
for a stream to reach its end at most ``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from spx.controller.kube import ApiError, KubeClient, resource_path
from spx.controller.manifests.naming import CONTAINER_NAME

logger = logging.getLogger("spx.controller.logs")

#: Times a broken stream of a pod that still runs is re-opened.
MAX_RECONNECTS = 5
#: Seconds between re-opening a broken stream.
RECONNECT_DELAY_S = 1.0


@dataclass
class Followed:
    """What one pod's log stream delivered so far (``text``), when (``received_at``), and whether the
    stream ended (``done``)."""

    pod: str
    job_uid: str
    text: str = ""
    #: The API server answered 404 for the pod's log: the pod is gone (reported through ``on_gone``).
    gone: bool = False
    received_at: dt.datetime | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


def _bounded(text: str, limit: int) -> str:
    """``text`` when within ``limit`` bytes; else its first half and its newest whole lines."""
    if len(text) <= limit:
        return text
    head = text[: limit // 2]
    tail = text[-(limit // 2):]
    tail = tail[tail.find("\n") + 1:] if "\n" in tail else tail
    return head.rsplit("\n", 1)[0] + "\n" + tail


@dataclass
class LogFollowers:
    """The followed logs, by pod uid; ``running(namespace, pod, pod_uid)`` says whether the pod still runs
    (the store). ``on_gone(namespace, pod, pod_uid)`` is told when the API server answers a stream with
    404 (the pod does not exist, whatever the store says): an observation, not a silent stop — the
    reactor re-lists and the decision step sees what vanished (a pod deleted during a watch gap)."""

    client: KubeClient
    limit_bytes: int
    running: Callable[[str, str, str], bool]
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    on_gone: Callable[[str, str, str], None] = lambda namespace, pod, pod_uid: None
    _pods: dict[str, Followed] = field(default_factory=dict)
    _by_job: dict[str, list[str]] = field(default_factory=dict)
    _job_uids: dict[tuple[str, str], str] = field(default_factory=dict)
    _job_keys: dict[str, tuple[str, str]] = field(default_factory=dict)

    def follow(self, namespace: str, pod: str, pod_uid: str, job_uid: str, job_name: str = "") -> None:
        """Start following pod ``pod`` of Job ``job_name`` (no-op when it is followed already)."""
        if pod_uid in self._pods:
            return
        f = Followed(pod, job_uid)
        self._pods[pod_uid] = f
        self._by_job.setdefault(job_uid, []).append(pod_uid)
        if job_name:
            self._job_uids[(namespace, job_name)] = job_uid
            self._job_keys[job_uid] = (namespace, job_name)
        f.task = asyncio.get_running_loop().create_task(self._follow(namespace, pod_uid, f), name=f"spx-log-{pod}")

    def following(self, pod_uid: str) -> bool:
        return pod_uid in self._pods

    def latest(self, job_uid: str) -> Followed | None:
        """The followed log of the Job's newest followed pod that delivered something."""
        for uid in reversed(self._by_job.get(job_uid, [])):
            f = self._pods.get(uid)
            if f is not None and f.text:
                return f
        return None

    def job_uid(self, namespace: str, job_name: str) -> str | None:
        """The uid of the Job ``job_name`` whose pods were followed — known after the Job is deleted, so
        what its pods wrote is still found (a Job deleted mid-run)."""
        return self._job_uids.get((namespace, job_name))

    async def settle(self, job_uid: str, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the streams of the Job's pods to end (their last lines)."""
        waits = [self._pods[u].done.wait() for u in self._by_job.get(job_uid, []) if u in self._pods]
        if waits:
            await asyncio.wait([asyncio.ensure_future(w) for w in waits], timeout=timeout)

    def forget_job(self, job_uid: str) -> None:
        """Stop following the Job's pods and drop what was kept (the experiment was decided or deleted)."""
        key = self._job_keys.pop(job_uid, None)
        if key is not None and self._job_uids.get(key) == job_uid:
            del self._job_uids[key]
        for uid in self._by_job.pop(job_uid, []):
            f = self._pods.pop(uid, None)
            if f is not None and f.task is not None and not f.task.done():
                f.task.cancel()

    async def stop(self) -> None:
        tasks = [f.task for f in self._pods.values() if f.task is not None and not f.task.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, namespace: str, pod_uid: str, f: Followed) -> None:
        path = resource_path("v1", "pods", namespace, f.pod, "log")
        params = {"container": CONTAINER_NAME, "follow": "true"}
        try:
            for attempt in range(MAX_RECONNECTS + 1):
                received = ""
                try:
                    async for chunk in self.client.stream(path, params):
                        received = _bounded(received + chunk.decode(errors="replace"), self.limit_bytes)
                        if len(received) >= len(f.text):  # a re-opened stream starts from the beginning
                            f.text = received
                            f.received_at = self.clock()
                except ApiError as err:
                    if err.not_found:  # the pod is gone: re-opening cannot help, the store is behind
                        logger.info("log stream of pod %s/%s: the API server has no such pod (404)", namespace, f.pod)
                        f.gone = True
                        self.on_gone(namespace, f.pod, pod_uid)
                        return
                    logger.info("log stream of pod %s/%s: %s", namespace, f.pod, err)
                except (OSError, TimeoutError, asyncio.IncompleteReadError) as err:
                    logger.info("log stream of pod %s/%s broke: %r", namespace, f.pod, err)
                except Exception as err:  # aiohttp's payload errors: the stream broke
                    logger.info("log stream of pod %s/%s broke: %r", namespace, f.pod, err)
                if not self.running(namespace, f.pod, pod_uid) or attempt == MAX_RECONNECTS:
                    return
                await asyncio.sleep(RECONNECT_DELAY_S)
        finally:
            f.done.set()
