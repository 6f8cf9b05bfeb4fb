"""One vocabulary of conditions and reasons, shared by the operator's status and ``spx run``'s status.json.

Pure: names and one function, no I/O.

**spx's own conditions** (always present, in this order):

- ``Scheduled``: True once the run's pod is bound to a node.
- ``Completed``: True once no bench process will run any more for this generation; the reason says how
  the run ended (:data:`COMPLETED_REASONS`).
- ``Decided``: the terminal condition a pipeline waits on (``kubectl wait --for=condition=Decided``):
  True on *every* terminal outcome with a reason of :data:`DECIDED_REASONS`; False with a reason of
  :data:`WAITING_REASONS` before.

**kstatus conditions** (``sigs.k8s.io/cli-utils/pkg/kstatus``, read by Flux, Argo CD's health checks
and ``helm install --wait``), computed from the phase by :func:`kstatus_conditions`:

- ``Reconciling`` True while the run is in progress (reason = the phase);
- ``Stalled`` True when the run ended without a verdict (InvalidSpec, BenchmarkFailed, InfraFailed):
  the resource will make no more progress until its spec changes;
- ``Ready`` True when a verdict was reached, whichever: a ``Fail`` verdict is a finished measurement,
  not a broken resource (pipelines gate on the ``Decided`` reason, not on ``Ready``).

Each condition carries ``observedGeneration``, so a tool can tell a stale condition from a fresh one.
"""

from __future__ import annotations

from typing import Final

from spx.vocabulary import BENCH_REASONS as _BENCH_REASONS
from spx.vocabulary import COMPLETED_REASONS as _COMPLETED_REASONS
from spx.vocabulary import CONDITION_TYPES as CONDITION_TYPES
from spx.vocabulary import FAILURE_REASONS as _FAILURE_REASONS
from spx.vocabulary import INFRA_REASONS as _INFRA_REASONS
from spx.vocabulary import KSTATUS_CONDITION_TYPES as KSTATUS_CONDITION_TYPES
from spx.vocabulary import SPX_CONDITION_TYPES as SPX_CONDITION_TYPES
from spx.vocabulary import TERMINAL_PHASES as _TERMINAL_PHASES
from spx.vocabulary import VERDICTS, WAITING_PHASES

#: ``Decided`` True: the verdict, or why there is none (:mod:`spx.vocabulary`).
VERDICT_REASONS: Final[frozenset[str]] = frozenset(VERDICTS)
FAILURE_REASONS: Final[frozenset[str]] = frozenset(_FAILURE_REASONS)
DECIDED_REASONS: Final[frozenset[str]] = VERDICT_REASONS | FAILURE_REASONS
#: ``Decided`` False: where the run stands (the phases before a terminal one).
WAITING_REASONS: Final[frozenset[str]] = frozenset(WAITING_PHASES)

#: Reasons of ``Completed`` True (:data:`spx.vocabulary.COMPLETED_REASON_MEANINGS` says what each means): the
#: cluster ended the run (→ ``InfraFailed``), the bench failed (→ ``BenchmarkFailed``), or every one.
INFRA_REASONS: Final[frozenset[str]] = frozenset(_INFRA_REASONS)
BENCH_REASONS: Final[frozenset[str]] = frozenset(_BENCH_REASONS)
COMPLETED_REASONS: Final[frozenset[str]] = frozenset(_COMPLETED_REASONS)

TERMINAL_PHASES: Final[frozenset[str]] = frozenset(_TERMINAL_PHASES)

#: (type, status, reason, message) of one condition.
ConditionTriple = tuple[str, str, str, str]


def kstatus_conditions(phase: str, decided_reason: str | None, message: str) -> list[ConditionTriple]:
    """The kstatus conditions (``Ready``, ``Reconciling``, ``Stalled``) of a status in ``phase``.

    ``decided_reason``: the reason of a True ``Decided`` (None while undecided). ``message`` goes on
    the condition that is True. Abnormal-true polarity as kstatus defines it: ``Reconciling`` and
    ``Stalled`` are True only while they apply.
    """
    if phase in TERMINAL_PHASES and decided_reason in VERDICT_REASONS:
        return [("Ready", "True", decided_reason, message),
                ("Reconciling", "False", "Decided", "the run is decided"),
                ("Stalled", "False", "Decided", "the run is decided")]
    if phase in TERMINAL_PHASES:
        reason = decided_reason or "Failed"
        return [("Ready", "False", reason, message),
                ("Reconciling", "False", reason, "no more progress for this generation"),
                ("Stalled", "True", reason, message)]
    return [("Ready", "False", phase, message),
            ("Reconciling", "True", phase, message),
            ("Stalled", "False", phase, "in progress")]
