"""The gate's decision on one experiment status: the exit code a release pipeline acts on (``spx gate``). Pure.

Exit codes (:mod:`spx.api.exit_codes`, ``docs/cli.md``): ``0`` Pass, ``1`` Fail, ``2`` Inconclusive or not decided
(yet), ``3`` unreadable (a status whose decision fields the model refuses). The decision is the ``Decided``
condition's: its reason (``Pass``/``Fail``/``Inconclusive``, or why there is no verdict) in a terminal phase
decides; a ``verdict`` field that disagrees with it, or stands without a ``Decided`` condition, is not trusted; a
Pass is cross-checked against the status's own fields (:func:`gate_decision`). Reading the status (a file, a
cluster) is :mod:`spx.cli.gate`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from spx.api.exit_codes import EXIT_FAIL, EXIT_UNDECIDED, EXIT_USAGE
from spx.api.exit_codes import EXIT_OK as EXIT_PASS
from spx.api.status import ExperimentStatus
from spx.vocabulary import CPU_NOTE, TERMINAL_PHASES, Verdict, one_of

#: The exit code of each verdict (every verdict of :data:`spx.vocabulary.VERDICTS`; a test checks).
EXIT_BY_VERDICT: dict[Verdict, int] = {"Pass": EXIT_PASS, "Fail": EXIT_FAIL, "Inconclusive": EXIT_UNDECIDED}


#: ``GateResult.reason`` when there was no status to decide on (:meth:`GateResult.unread`).
UNREAD_REASONS: tuple[str, ...] = ("Unreadable", "Unreachable")


@dataclass
class GateResult:
    """What the gate decided and why."""

    exit_code: int
    source: str
    decided: bool
    verdict: str | None = None
    phase: str | None = None
    reason: str | None = None
    message: str = ""
    verdict_reasons: list[str] = field(default_factory=list)
    #: ``--wait`` polls again (a cluster that may come back); false for a kubeconfig that cannot be used.
    retry: bool = True

    @property
    def unread(self) -> bool:
        """The status could not be read (reason ``Unreadable``: a usage error; ``Unreachable``: no cluster): not a
        decision at all, so the line goes to stderr."""
        return self.reason in UNREAD_REASONS

    def line(self) -> str:
        """One human-readable line, e.g. ``Pass: ml/h200-tp8 (phase Succeeded)``."""
        if self.unread:
            return f"error: {self.message or self.source}"
        head = self.verdict if self.verdict else ("Undecided" if not self.decided else f"No verdict ({self.reason})")
        text = f"{head}: {self.source}"
        if self.phase:
            text += f" (phase {self.phase})"
        if self.message:
            text += f" — {self.message}"
        return text


#: The fields of :class:`~spx.api.status.ExperimentStatus` a decision rests on. Only these are validated, so
#: a kernel, serving or accuracy section written by another spx version does not keep a release from its gate.
DECISION_FIELDS = ("phase", "observed_generation", "conditions", "verdict", "verdict_reasons", "message")
#: What every CPU smoke run's status message starts with (:data:`spx.vocabulary.CPU_NOTE`).
CPU_MESSAGE_PREFIX = CPU_NOTE.split(":", 1)[0]


def decision_status(status: Mapping[str, Any] | None) -> ExperimentStatus:
    """The decision fields (:data:`DECISION_FIELDS`) of a camelCase ``.status`` mapping, parsed by the status model.

    Raises:
        pydantic.ValidationError: a decision field the model refuses (a verdict that is not one, a condition
            without its type, status, reason or lastTransitionTime, a phase spx does not have).
    """
    aliases = {ExperimentStatus.model_fields[name].alias or name for name in DECISION_FIELDS}
    return ExperimentStatus.model_validate({k: v for k, v in (status or {}).items() if k in aliases})


def gate_decision(status: ExperimentStatus | Mapping[str, Any] | None, source: str,
                  generation: int | None = None) -> GateResult:
    """The gate decision for one experiment status: the model, or the camelCase ``.status`` mapping read through
    :func:`decision_status` (a mapping the model refuses is not a decision: exit 2, the message names the field; a
    verdict of a wrong type or case is no verdict at all: unreadable, exit 3).

    Cross-checks (issue #35): a Pass of a CPU smoke run (``judgement.cpu``, ``environment.device`` cpu or the CPU
    note in the message) is trusted only with ``judgement.cpuTimingsAllowed`` (the run's gate.allowCpuTimings),
    else exit 2.

    ``generation`` is the object's ``metadata.generation`` when read from a cluster: a status
    observed for an older generation describes an older spec and is not a decision for this one.
    """
    cpu = _cpu_run(status)
    parsed = _parsed(status, source)
    if isinstance(parsed, GateResult):
        return parsed
    status = parsed
    phase = status.phase
    decided_cond = next((c for c in status.conditions if c.type == "Decided"), None)
    verdict = status.verdict
    reasons = list(status.verdict_reasons)

    observed = status.observed_generation
    if decided_cond is not None and decided_cond.observed_generation is not None:
        observed = decided_cond.observed_generation
    if generation is not None and observed is not None and observed < generation:
        return GateResult(
            EXIT_UNDECIDED,
            source,
            False,
            None,
            phase,
            message=f"status is for generation {observed}, the spec is at generation {generation}: not decided yet",
        )

    if decided_cond is None:
        msg = "no Decided condition yet"
        if verdict is not None:
            msg += f": a bare verdict field ({verdict!r}) is not a decision"
        return GateResult(EXIT_UNDECIDED, source, False, None, phase, message=msg)

    if decided_cond.status != "True":
        msg = decided_cond.message or "the Decided condition is not True yet"
        return GateResult(EXIT_UNDECIDED, source, False, None, phase, decided_cond.reason, msg)

    reason = decided_cond.reason
    if phase not in TERMINAL_PHASES:
        return GateResult(EXIT_UNDECIDED, source, False, None, phase, reason,
                          f"Decided is True but the phase is {phase!r}, not {one_of(TERMINAL_PHASES)}: not decided yet")
    if reason in EXIT_BY_VERDICT:
        return _verdict_decision(status, reason, decided_cond.message, source, cpu)
    msg = decided_cond.message or status.message or ""
    if verdict is not None:
        msg = f"decided {reason} without a verdict (a verdict field {verdict!r} is not trusted): " + msg
    return GateResult(EXIT_UNDECIDED, source, True, None, phase, reason, msg, reasons)


def _parsed(status: ExperimentStatus | Mapping[str, Any] | None, source: str) -> ExperimentStatus | GateResult:
    """``status`` as the model (a mapping through :func:`decision_status`), or the :class:`GateResult` of a mapping the
    model refuses: unreadable (exit 3) for a verdict of a wrong type or case, else not a decision (exit 2)."""
    if isinstance(status, ExperimentStatus):
        return status
    try:
        return decision_status(status)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        if first["loc"][:1] == ("verdict",):  # a verdict of a wrong type or case is no verdict: unreadable
            return GateResult(EXIT_USAGE, source, False, reason="Unreadable", message=(
                f"{source}: verdict {str(first.get('input'))[:80]!r} is not a verdict ({first['msg']}): the status "
                "is unreadable; a verdict is exactly one of Pass, Fail, Inconclusive"))
        return GateResult(EXIT_UNDECIDED, source, False, message=(
            f"the status is not an ExperimentStatus spx can decide on ({where}: {first['msg']}; got "
            f"{str(first.get('input'))[:80]!r}): not a decision"))


def _verdict_decision(status: ExperimentStatus, reason: Verdict, cond_message: str | None, source: str,
                      cpu: tuple[bool, bool]) -> GateResult:
    """The decision of a terminal status whose ``Decided`` reason is a verdict (``reason``): the reason decides; a
    Pass needs the verdict field to say Pass too (fail closed), and a CPU smoke run's Pass needs its CPU timings
    allowed (``cpu``: :func:`_cpu_run`), else exit 2."""
    phase, verdict, reasons = status.phase, status.verdict, list(status.verdict_reasons)
    msg = "; ".join(reasons) or cond_message or ""
    if verdict is not None and verdict != reason:
        if reason == "Pass":  # fail closed: a Pass needs the verdict field to say Pass too
            code = EXIT_BY_VERDICT[verdict]
            return GateResult(code, source, code != EXIT_UNDECIDED, verdict if code != EXIT_UNDECIDED else None,
                              phase, reason, f"the Decided reason is 'Pass' but the verdict field says {verdict!r}: "
                              "a Pass needs both, so the status is not a Pass; " + msg, reasons)
        msg = f"the verdict field says {verdict!r} but the Decided reason is {reason!r}: the reason decides; " + msg
    if reason == "Pass" and cpu[0] and not cpu[1]:
        return GateResult(EXIT_UNDECIDED, source, False, None, phase, reason, (
            "a CPU smoke run's Pass is not trusted without gate.allowCpuTimings (status.judgement.cpuTimingsAllowed "
            "is not true): CPU timings say nothing about GPUs; " + msg), reasons)
    return GateResult(EXIT_BY_VERDICT[reason], source, True, reason, phase, reason, msg, reasons)


def _cpu_run(status: ExperimentStatus | Mapping[str, Any] | None) -> tuple[bool, bool]:
    """``(a CPU smoke run, its CPU timings allowed)`` from the status's own fields, read leniently (a section of
    another spx version never keeps a release from its gate): ``judgement.cpu`` /
    ``judgement.cpuTimingsAllowed``, ``environment.device``, the CPU note that starts the message."""
    if isinstance(status, ExperimentStatus):
        j, env, message = status.judgement, status.environment, status.message or ""
        return ((j is not None and j.cpu) or (env is not None and env.device == "cpu")
                or message.startswith(CPU_MESSAGE_PREFIX), j is not None and j.cpu_timings_allowed)
    raw = status or {}
    j_raw, env_raw = raw.get("judgement"), raw.get("environment")
    j_map = j_raw if isinstance(j_raw, Mapping) else {}
    env_map = env_raw if isinstance(env_raw, Mapping) else {}
    text = raw.get("message")
    cpu = (j_map.get("cpu") is True or env_map.get("device") == "cpu"
           or (isinstance(text, str) and text.startswith(CPU_MESSAGE_PREFIX)))
    return cpu, j_map.get("cpuTimingsAllowed") is True
