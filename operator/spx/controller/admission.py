"""Admission under the operator's concurrency limit (``SPX_MAX_CONCURRENT_EXPERIMENTS``): pure.

An experiment holds a slot from the moment it is admitted (a reservation, until its Job exists)
while its Job of the current generation is unfinished. The queued ones are admitted FIFO by
creation time. Nothing is admitted before the reactor has listed both the experiments *and* the
Jobs from the API server (``synced``): an operator restarted with experiments queued would
otherwise count no running Jobs and exceed the limit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

Key = tuple[str, str]  # (namespace, experiment name)


@dataclass(frozen=True)
class Verdict:
    """``admitted``, with ``active`` experiments holding a slot; ``synced`` False: wait for the lists."""

    admitted: bool
    active: int
    synced: bool = True


def admit(key: Key, limit: int, active: Collection[Key], waiting: Sequence[Key], synced: bool) -> Verdict:
    """May ``key`` start a run?

    Args:
        key: the experiment asking.
        limit: the concurrency limit; 0 = none.
        active: the experiments holding a slot (unfinished Job of their generation, or reserved).
        waiting: the experiments in phase Queued, oldest first.
        synced: the reactor has listed experiments and Jobs since it started.
    """
    if not synced:
        return Verdict(False, len(active), synced=False)
    if limit <= 0 or key in active:
        return Verdict(True, len(active))
    free = limit - len(active)
    if free <= 0:
        return Verdict(False, len(active))
    queue = [k for k in waiting if k not in active]
    if key not in queue:
        queue.append(key)
    return Verdict(queue.index(key) < free, len(active))
