"""Leader election over a ``coordination.k8s.io/v1`` Lease, so two replicas never both decide.

The protocol is client-go's ``leaderelection`` (``k8s.io/client-go/tools/leaderelection``) with its
defaults scaled by :class:`Timing`: a candidate takes the Lease when it is free, its own, or expired,
where *expired* is judged by this process's clock from the moment it last *saw the record change*
(never from the ``renewTime`` another machine wrote: clocks differ); the leader renews every
``retry_s`` and stops acting when it could not renew for ``renew_deadline_s`` (< ``lease_s``), so a
deposed leader has stopped before another may take over. Writes carry the ``resourceVersion`` read,
so two candidates racing for an expired Lease cannot both win (one gets 409 Conflict).

Every replica keeps watching (its store stays warm); only the leader's reactor workers reconcile
(:meth:`LeaderElector.wait_leading`). Should two leaders ever overlap, the Job name is still
deterministic (``<experiment>-g<generation>``), so a second create meets AlreadyExists: no double Job.

:func:`lease_action` is the pure step (table-tested); :class:`LeaderElector` does the I/O.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spx.controller.kube import ApiError, KubeClient, resource_path

logger = logging.getLogger("spx.controller.leader")

LEASE_API = "coordination.k8s.io/v1"


@dataclass(frozen=True)
class Timing:
    """Seconds of the election (client-go's defaults: 15 / 10 / 2)."""

    lease_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.lease_s:
            raise ValueError(f"leader election needs 0 < retry ({self.retry_s}) < renew deadline "
                             f"({self.renew_deadline_s}) < lease duration ({self.lease_s}) seconds")


Action = Literal["create", "renew", "take", "wait"]


def lease_action(lease: Mapping[str, Any] | None, me: str, observed_unchanged_s: float, timing: Timing) -> Action:
    """What a candidate ``me`` does with the Lease it just read.

    Args:
        lease: the Lease object (None: it does not exist).
        me: this candidate's identity.
        observed_unchanged_s: seconds (this process's monotonic clock) since this candidate first saw
            the Lease's current ``resourceVersion``.
        timing: the election's durations.

    Returns:
        ``create`` (no Lease), ``renew`` (it is ours), ``take`` (free, or its holder let it expire:
        unchanged for longer than its ``leaseDurationSeconds``), or ``wait`` (someone else holds it).
    """
    if lease is None:
        return "create"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if holder == me:
        return "renew"
    if not holder:
        return "take"
    duration = float(spec.get("leaseDurationSeconds") or timing.lease_s)
    return "take" if observed_unchanged_s > duration else "wait"


def micro_time(now: dt.datetime) -> str:
    """A ``MicroTime`` as the API server wants it (RFC 3339, microseconds, ``Z``)."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderElector:
    """Holds (or waits for) the Lease ``namespace/name`` as ``identity``; :meth:`run` until cancelled."""

    client: KubeClient
    namespace: str
    name: str
    identity: str
    timing: Timing = field(default_factory=Timing)
    monotonic: Callable[[], float] = time.monotonic
    _valid_until: float = 0.0
    _seen: tuple[str, float] | None = None  # (resourceVersion, monotonic time first seen)
    _leading: asyncio.Event = field(default_factory=asyncio.Event)
    transitions: int = 0

    @property
    def is_leader(self) -> bool:
        """Whether this replica holds the Lease and renewed it within the renew deadline."""
        leading = self.monotonic() < self._valid_until
        if not leading and self._leading.is_set():
            self._leading.clear()
            logger.warning("lost the leader Lease %s/%s: not reconciling until it is won again", self.namespace,
                           self.name)
        return leading

    async def wait_leading(self) -> None:
        """Return once this replica leads (at once if it does)."""
        while not self.is_leader:
            await self._leading.wait()

    def _path(self, name: str | None = None) -> str:
        return resource_path(LEASE_API, "leases", self.namespace, name)

    def _body(self, lease: Mapping[str, Any] | None, now: dt.datetime, take: bool) -> dict[str, Any]:
        spec = dict((lease or {}).get("spec") or {})
        stamp = micro_time(now)
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=int(self.timing.lease_s), renewTime=stamp)
        if take or lease is None:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease is not None else 0)
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            metadata["resourceVersion"] = (lease.get("metadata") or {}).get("resourceVersion")
        return {"apiVersion": LEASE_API, "kind": "Lease", "metadata": metadata, "spec": spec}

    async def try_once(self) -> bool:
        """Read the Lease, then create, renew or take it if :func:`lease_action` says so; whether we lead now."""
        started = self.monotonic()
        try:
            lease = await self.client.get(self._path(self.name))
        except ApiError as err:
            if not err.not_found:
                raise
            lease = None
        rv = str(((lease or {}).get("metadata") or {}).get("resourceVersion") or "")
        if self._seen is None or self._seen[0] != rv:
            self._seen = (rv, started)
        action = lease_action(lease, self.identity, started - self._seen[1], self.timing)
        if action == "wait":
            return self.is_leader
        now = dt.datetime.now(dt.UTC)
        try:
            if action == "create":
                await self.client.create(self._path(), self._body(None, now, take=True))
            else:
                await self.client.request("PUT", self._path(self.name), body=self._body(lease, now, take=action == "take"))
        except ApiError as err:
            if err.conflict or err.exists:  # another candidate wrote first: theirs this round
                return self.is_leader
            raise
        if action != "renew":
            self.transitions += 1
            logger.info("became the leader (Lease %s/%s, %s)", self.namespace, self.name, self.identity)
        self._valid_until = started + self.timing.renew_deadline_s
        self._leading.set()
        return True

    async def run(self) -> None:
        """Try every ``retry_s`` for ever (cancel to stop); errors are logged and retried."""
        while True:
            try:
                await self.try_once()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                logger.warning("leader election: %s", err)
            self.is_leader  # noqa: B018 (clears the event when the deadline passed)
            await asyncio.sleep(self.timing.retry_s)

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown (holder cleared), so a standby takes over at once."""
        if not self.is_leader:
            return
        self._valid_until = 0.0
        try:
            lease = await self.client.get(self._path(self.name))
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                await self.client.request("PUT", self._path(self.name), body=lease)
        except (ApiError, OSError, TimeoutError) as err:
            logger.info("could not release the leader Lease: %s", err)
