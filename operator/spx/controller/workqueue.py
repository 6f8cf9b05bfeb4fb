"""The reactor's work queue: deduplicating, two-level, one worker per key at a time."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

Key = tuple[str, str]  # (namespace, experiment name)

#: Seconds follow-up work may be held back while admission work is in flight (a burst of applies).
HOLD_S = 5.0


class WorkQueue:
    """Deduplicating two-level work queue: a key is queued at most once and processed by one worker
    at a time.

    A key added while it is being processed is processed again right after. ``urgent`` keys (new
    experiments and new generations, which wait for a Job) go before the rest (progress of runs
    already started), so a burst of applies is admitted before the follow-up work; and while urgent
    keys are being processed, the rest is held back for at most ``hold_s`` seconds from when the
    holding began (then it flows even if the burst goes on), so that status writes and log reads do
    not compete with the Job creations for the API server (``benchmarks/operator_scale.py``
    measures it). ``hold_s = 0`` turns the holding off. ``add_after``
    schedules a key (the earliest pending time wins). ``on_depth`` is told the number of queued keys
    after every put and get (the reactor sets ``spx_workqueue_depth`` with it).
    """

    def __init__(self, on_depth: Callable[[int], None] | None = None, hold_s: float = HOLD_S) -> None:
        self._on_depth = on_depth
        self._hold_s = hold_s
        self._urgent_active: set[Key] = set()
        self._hold_since: float | None = None
        self._held: collections.deque[asyncio.Future[None]] = collections.deque()  # workers holding back
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
        if urgent:
            self._wake(1)  # a worker holding back follow-up work takes it: admission first
        self._depth()

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
            urgent = bool(self._urgent)
            if not urgent and (left := self._held_for()) > 0:
                self._available.release()  # the follow-up key stays queued
                woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._held.append(woken)
                try:
                    await asyncio.wait_for(woken, left)
                except TimeoutError:
                    pass
                continue
            key = self._urgent.popleft() if urgent else self._normal.popleft()
            if key in self._queued and key not in self._active:  # else: a stale entry of a promoted key
                del self._queued[key]
                self._active.add(key)
                if urgent:
                    self._urgent_active.add(key)
                self._depth()
                return key

    def done(self, key: Key) -> None:
        self._active.discard(key)
        if key in self._urgent_active:
            self._urgent_active.discard(key)
            if not self._urgent_active:
                self._hold_since = None
                self._wake(len(self._held))
        if key in self._dirty:
            self.add(key, self._dirty.pop(key))

    def _held_for(self) -> float:
        """Seconds follow-up work is still held back (0: not held): urgent keys are in flight and the
        holding began less than ``hold_s`` ago."""
        if not self._urgent_active or self._hold_s <= 0:
            return 0.0
        now = time.monotonic()
        if self._hold_since is None:
            self._hold_since = now
        return max(0.0, self._hold_since + self._hold_s - now)

    def _wake(self, n: int) -> None:
        """Wake up to ``n`` workers that hold back follow-up work (they look at the queue again)."""
        while n > 0 and self._held:
            woken = self._held.popleft()
            if not woken.done():
                woken.set_result(None)
                n -= 1

    def _depth(self) -> None:
        if self._on_depth is not None:
            self._on_depth(len(self._queued))

    def close(self) -> None:
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
