"""What the controller observed of one run: the :class:`Observation` the pod readings produce and the
decision step (:mod:`spx.controller.decide.conclusion`) acts on, the :class:`Timeouts` they are judged
against, and the :class:`Memory` the experiment's status keeps of pods that are gone. Types only.

Produced by :func:`spx.controller.decide.pod_outcome.observe` over :mod:`spx.controller.decide.pod_startup`,
:mod:`spx.controller.decide.pod_disruption`, :mod:`spx.controller.decide.pod_exit` and :mod:`spx.controller.decide.job_status`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spx.vocabulary import COMPLETED_REASONS, CompletedReason, PodFailureReason, member

State = Literal["suspended", "pending", "unschedulable", "scheduled", "running", "transition", "succeeded", "failed"]
#: How a bench pod's failure ended the run: the benchmark's fault or the infrastructure's.
Outcome = PodFailureReason


@dataclass(frozen=True)
class Timeouts:
    """Limits on a run's pod problems (the defaults of :class:`~spx.controller.settings.OperatorSettings`).

    ``schedule_timeout_s``: seconds a pod may stay Unschedulable; ``image_pull_timeout_s``: seconds of
    image-pull / container-creation errors; ``max_disruptions``: evictions retried before InfraFailed;
    ``replacement_timeout_s``: seconds the Job controller may take to create the replacement of a
    disrupted pod, counted from the disruption — its own bound, never below the Job controller's pod
    back-off (:func:`spx.controller.decide.pod_disruption.replacement_wait_s`), whatever the others are.
    """

    schedule_timeout_s: float = 900.0
    image_pull_timeout_s: float = 300.0
    max_disruptions: int = 3
    replacement_timeout_s: float = 300.0


@dataclass(frozen=True)
class Observation:
    """Where a run stands.

    ``state``: ``suspended`` (Kueue), ``pending`` (no pod bound yet), ``unschedulable`` (still within
    the timeout), ``scheduled`` (bound, container not running), ``running``, ``succeeded`` (Job
    Complete), ``failed``. For ``failed``, ``outcome`` says whose fault and ``reason`` is the
    ``Completed`` condition's reason. ``pod`` is the pod to read results from (the last one that
    ran), ``abort`` whether the operator must delete the Job itself (it gave up on a Job that
    Kubernetes would keep trying), ``recheck_after_s`` when a timeout could fire next.
    """

    state: State
    reason: str
    message: str
    outcome: Outcome | None = None
    pod: Mapping[str, Any] | None = None
    node: str | None = None
    abort: bool = False
    recheck_after_s: float | None = None
    disruptions: int = 0
    exit_code: int | None = None
    check_nodes: tuple[str, ...] = ()

    @property
    def completed_reason(self) -> CompletedReason:
        """The ``Completed`` reason of a run that ended: ``reason`` when it failed, else ``JobSucceeded``.

        Raises:
            ValueError: a failed observation whose reason is not a :data:`~spx.vocabulary.CompletedReason`
                (a pod reading that spelt one otherwise).
        """
        return member(self.reason, COMPLETED_REASONS, "Observation.reason") if self.state == "failed" else "JobSucceeded"


@dataclass(frozen=True)
class Memory:
    """What the experiment's status remembers of a run whose pods may be gone: ``seen_scheduled`` (its
    ``Scheduled`` condition was True: a pod was bound), ``seen_started`` (the bench wrote output while it
    ran), ``unschedulable`` (the scheduler's last message while the pod could not be placed)."""

    seen_scheduled: bool = False
    seen_started: bool = False
    unschedulable: str | None = None
