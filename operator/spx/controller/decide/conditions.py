"""Status and condition computation: pure functions from (previous status, what happened) to status.

The vocabulary (condition types, reasons) is :mod:`spx.api.conditions`. Six conditions, always
present: spx's three, then kstatus's ``Ready``/``Reconciling``/``Stalled`` (derived from the phase by
:func:`spx.api.conditions.kstatus_conditions` on every step). spx's three:

- ``Scheduled`` — True once the current run's pod is bound to a node. False with reason
  ``Queued`` (held by the operator's concurrency limit), ``Suspended`` (Kueue has not admitted the
  Job yet), ``Pending`` (Job created, pod not bound), ``Unschedulable`` or ``InvalidSpec``.
- ``Completed`` — True once no bench process will run any more for this generation; the reason says
  how the run ended (``JobSucceeded``, ``JobFailed``, ``DeadlineExceeded``, ``Unschedulable``,
  ``ImagePullFailed``, ``Evicted``, ``NotRun`` …). False (``Pending`` / ``Running``) before.
- ``Decided`` — the terminal condition a pipeline waits on (``kubectl wait --for=condition=Decided``):
  True on *every* terminal outcome with reason ``Pass``, ``Fail``, ``Inconclusive`` (a verdict),
  ``InvalidSpec``, ``BenchmarkFailed`` or ``InfraFailed``; False (``Pending`` / ``Queued`` /
  ``Running`` / ``Analyzing``) before.

``lastTransitionTime`` changes only when a condition's ``status`` changes (metav1.Condition
semantics); a new reason or message alone keeps it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from spx.api.base import utc_now
from spx.api.conditions import (
    CONDITION_TYPES,
    FAILURE_REASONS,
    SPX_CONDITION_TYPES,
    TERMINAL_PHASES,
    VERDICT_REASONS,
    kstatus_conditions,
)
from spx.api.status import Condition, DecidedReason, ExperimentStatus, KernelStatus, Phase, Verdict
from spx.vocabulary import CompletedReason

__all__ = ["CONDITION_TYPES", "FAILURE_REASONS", "TERMINAL_PHASES", "VERDICT_REASONS"]

_CONDITION_ORDER: dict[str, int] = {t: i for i, t in enumerate(CONDITION_TYPES)}
MAX_MESSAGE = 1024


#: RFC 3339 UTC timestamps, the one implementation in :func:`spx.api.base.utc_now`.
now_rfc3339 = utc_now


def parse_time(value: str | None) -> dt.datetime | None:
    """Parse a Kubernetes timestamp (``Z`` or offset, optional fraction); None if absent/invalid."""
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def seconds_since(value: str | None, now: dt.datetime) -> float | None:
    """Seconds from the Kubernetes timestamp ``value`` (:func:`parse_time`) to ``now``; None if absent/invalid."""
    t = parse_time(value)
    return None if t is None else (now - t).total_seconds()


def _clip(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: str,
    reason: str,
    message: str,
    now: str,
    generation: int | None,
) -> list[Condition]:
    """Return ``conditions`` with ``type_`` set; ``lastTransitionTime`` kept unless ``status`` changed.

    Conditions keep the canonical order (Scheduled, Completed, Decided, then any others).
    """
    previous = get_condition(conditions, type_)
    ltt = previous.last_transition_time if previous is not None and previous.status == status else now
    updated = Condition(
        type=type_,
        status=status,  # type: ignore[arg-type]
        reason=reason,
        message=_clip(message),
        last_transition_time=ltt,
        observed_generation=generation,
    )
    out = [c for c in conditions if c.type != type_] + [updated]
    return sorted(out, key=lambda c: _CONDITION_ORDER.get(c.type, len(_CONDITION_ORDER)))


def get_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition of ``type_`` in ``conditions``; None if there is none."""
    return next((c for c in conditions if c.type == type_), None)


@dataclass(frozen=True)
class Transition:
    """What the decision step observed, as the inputs of a status transition.

    ``scheduled``/``completed``/``decided`` are ``(status, reason, message)`` triples; ``None`` keeps
    the condition as it is.
    """

    phase: Phase
    message: str
    scheduled: tuple[str, str, str] | None = None
    completed: tuple[str, str, str] | None = None
    decided: tuple[str, str, str] | None = None


def apply_transition(status: ExperimentStatus, transition: Transition, now: str, generation: int | None) -> ExperimentStatus:
    """A new status with ``transition`` applied (phase, message, conditions); the input is not changed."""
    conditions = list(status.conditions)
    for type_, triple in (("Scheduled", transition.scheduled), ("Completed", transition.completed), ("Decided", transition.decided)):
        if triple is not None:
            conditions = set_condition(conditions, type_, *triple, now=now, generation=generation)
    decided = get_condition(conditions, "Decided")
    reason = decided.reason if decided is not None and decided.status == "True" else None
    for type_, cstatus, creason, cmessage in kstatus_conditions(transition.phase, reason, transition.message):
        conditions = set_condition(conditions, type_, cstatus, creason, cmessage, now=now, generation=generation)
    return status.model_copy(update={"phase": transition.phase, "message": _clip(transition.message), "conditions": conditions})


def ensure_all_conditions(status: ExperimentStatus, now: str, generation: int | None) -> ExperimentStatus:
    """Add any missing condition as Unknown/``Pending`` so a reader always finds all three."""
    conditions = list(status.conditions)
    for type_ in SPX_CONDITION_TYPES:
        if get_condition(conditions, type_) is None:
            conditions = set_condition(conditions, type_, "Unknown", "Pending", "", now, generation)
    return status.model_copy(update={"conditions": conditions})


def new_run(previous: ExperimentStatus, generation: int, now: str) -> ExperimentStatus:
    """Status at the start of a run of ``generation``: results of an older generation cleared.

    Conditions are carried over (so their ``lastTransitionTime`` reflect real transitions) and then
    set back to not-yet by the caller's next :class:`Transition`.
    """
    base = ExperimentStatus(
        phase="Pending",
        observed_generation=generation,
        conditions=list(previous.conditions),
    )
    return ensure_all_conditions(base, now, generation)


# Canonical steps -----------------------------------------------------------------------------------


def _not_started(phase: Phase, msg: str, scheduled_reason: str, decided_reason: str) -> Transition:
    """A step before the pod is bound: ``Scheduled`` False with ``msg``, nothing run, nothing decided."""
    return Transition(
        phase=phase,
        message=msg,
        scheduled=("False", scheduled_reason, msg),
        completed=("False", "Pending", "the run has not started"),
        decided=("False", decided_reason, "waiting for the run"),
    )


def queued(active: int, limit: int) -> Transition:
    """Held by the operator's concurrency limit: ``active`` of ``limit`` experiments are running."""
    msg = f"waiting for a slot: {active} of {limit} experiments are running (operator concurrency limit)"
    return _not_started("Queued", msg, "Queued", "Queued")


def job_pending(job: str, detail: str = "") -> Transition:
    """Job ``job`` created, its pod not bound yet (``detail`` replaces the default message)."""
    msg = detail or f"Job {job} created, waiting for its pod to be scheduled"
    return _not_started("Pending", msg, "Pending", "Pending")


def suspended(job: str, queue: str | None) -> Transition:
    """Job ``job`` is suspended until Kueue admits it (``queue``: its LocalQueue, if known)."""
    msg = f"Job {job} is suspended, waiting for Kueue admission" + (f" in LocalQueue {queue}" if queue else "")
    return _not_started("Queued", msg, "Suspended", "Queued")


def unschedulable_waiting(job: str, detail: str) -> Transition:
    """The pod of Job ``job`` is unschedulable (``detail``: the scheduler's message) but may still be bound."""
    msg = f"the pod of Job {job} is unschedulable: {detail}"
    return _not_started("Pending", msg, "Unschedulable", "Pending")


def running(job: str, node: str | None, started: bool, detail: str = "") -> Transition:
    """The pod of Job ``job`` is bound (to ``node``, if known); ``started``: the bench process runs."""
    where = f" on node {node}" if node else ""
    msg = detail or (f"the benchmark is running{where}" if started else f"the pod of Job {job} is starting{where}")
    return Transition(
        phase="Running",
        message=msg,
        scheduled=("True", "PodScheduled", f"the pod of Job {job} is bound{where}"),
        completed=("False", "Running", msg),
        decided=("False", "Running", "waiting for the run to finish"),
    )


def analyzing(job: str, completed_reason: CompletedReason, completed_message: str) -> Transition:
    """Job ``job`` finished (``Completed`` True with the given reason); its result is being read."""
    return Transition(
        phase="Analyzing",
        message=f"Job {job} finished; reading and analysing its result",
        completed=("True", completed_reason, completed_message),
        decided=("False", "Analyzing", "reading the result"),
    )


def decided(
    verdict: Verdict,
    reasons: Sequence[str],
    completed_reason: CompletedReason,
    completed_message: str,
    scheduled: tuple[str, str, str] | None = None,
) -> Transition:
    """A verdict reached: ``Succeeded``, ``Decided`` True with the verdict as reason and ``reasons`` joined."""
    first = reasons[0] if reasons else ""
    msg = f"verdict {verdict}" + (f": {first}" if first else "")
    return Transition(
        phase="Succeeded",
        message=msg,
        scheduled=scheduled,
        completed=("True", completed_reason, completed_message),
        decided=("True", verdict, "; ".join(reasons) or msg),
    )


def ran_on(node: str | None) -> tuple[str, str, str] | None:
    """``Scheduled`` of a finished run whose pod was bound to ``node`` (None: leave it as it is)."""
    return ("True", "PodScheduled", f"the pod ran on node {node}") if node else None


def failed(
    reason: DecidedReason,
    message: str,
    completed_reason: CompletedReason,
    completed_message: str | None = None,
    scheduled: tuple[str, str, str] | None = None,
) -> Transition:
    """No verdict: ``Failed``, ``Completed`` and ``Decided`` True (``reason`` one of :data:`FAILURE_REASONS`)."""
    return Transition(
        phase="Failed",
        message=f"{reason}: {message}",
        scheduled=scheduled,
        completed=("True", completed_reason, completed_message or message),
        decided=("True", reason, message),
    )


def invalid_spec(problems: Sequence[str]) -> Transition:
    """The spec failed validation (``problems``): failed without a run."""
    text = "; ".join(problems)
    return failed(
        "InvalidSpec",
        f"the spec failed validation: {text}",
        "NotRun",
        "the run was not started: the spec is invalid",
        scheduled=("False", "InvalidSpec", "not scheduled: the spec is invalid"),
    )


# Readers -------------------------------------------------------------------------------------------


def is_terminal(status: ExperimentStatus) -> bool:
    """True in a phase of :data:`TERMINAL_PHASES` (nothing more happens for this generation)."""
    return status.phase in TERMINAL_PHASES


def decided_reason(status: ExperimentStatus) -> str | None:
    """The reason of a True ``Decided`` condition; None while undecided."""
    cond = get_condition(status.conditions, "Decided")
    return cond.reason if cond is not None and cond.status == "True" else None


def with_kernel(
    status: ExperimentStatus,
    kernel: KernelStatus | None,
    verdict: Verdict | None,
    reasons: Sequence[str],
) -> ExperimentStatus:
    """A new status with the kernel section, verdict and its reasons replaced; the input is not changed."""
    return status.model_copy(update={"kernel": kernel, "verdict": verdict, "verdict_reasons": list(reasons)})
