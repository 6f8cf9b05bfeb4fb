"""Admission under the operator's concurrency limit (``SPX_MAX_CONCURRENT_EXPERIMENTS``): pure.

An experiment holds a slot from the moment it is admitted (a reservation, until its Job exists)
while its Job of the current generation is unfinished. The queued ones are admitted FIFO by
creation time. Nothing is admitted before the reactor has listed both the experiments *and* the
Jobs from the API server (``synced``): an operator restarted with experiments queued would
otherwise count no running Jobs and exceed the limit.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from spx.controller.manifests import LABEL_GENERATION
from spx.controller.pod_outcome import job_finished
from spx.controller.store import Store, deleting, generation, meta

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
        waiting: the experiments not yet admitted (:func:`waiting`), oldest first.
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


def active(store: Store, reserved: Iterable[Key] = ()) -> set[Key]:
    """Experiments holding a slot: an unfinished Job of their current generation, or a reservation."""
    out = set(reserved)
    for job in store.jobs.values():
        if job_finished(job) or deleting(job):
            continue
        key = store.experiment_of_job(job)
        exp = store.experiments.get(key) if key is not None else None
        if key is not None and (meta(job).get("labels") or {}).get(LABEL_GENERATION) == str(generation(exp or {})):
            out.add(key)
    return out


def waiting(store: Store) -> list[Key]:
    """Experiments not yet admitted (new, Pending or Queued, no Job), oldest first (FIFO admission).

    New ones count too: with several workers, the second of two experiments created together may be
    reconciled first and must not take the slot of the first. Ties of ``creationTimestamp`` (whole
    seconds on a real API server) fall back to the name.
    """
    rows = []
    for key, exp in store.experiments.items():
        st = exp.get("status") or {}
        if (st.get("phase") or "Pending") in ("Pending", "Queued") and not st.get("jobName") and not deleting(exp):
            rows.append((str(meta(exp).get("creationTimestamp") or ""), key))
    return [k for _, k in sorted(rows)]
