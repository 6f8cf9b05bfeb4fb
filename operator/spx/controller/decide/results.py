"""Read what a bench pod produced: its termination message (summary) and its log (JSON lines).

Pure: strings in, validated models and a list of human-readable problems out. Nothing is
discarded here; the decision step keeps the raw inputs (the result ConfigMap) next to whatever validated.

The bench writes (``spx run … --summary-file /dev/termination-log --jsonl``):

- to its termination message, a :class:`~spx.api.ResultSummary` (compact JSON, ≤ 4 KiB);
- to stdout, one JSON object per line: ``{"kind": "point", …}`` per measured token count, then
  ``{"kind": "result", "result": {…}}`` with the whole :class:`~spx.api.KernelResult`. Other lines
  (stderr is merged into the pod log) are ignored.

With ``spec.serving`` (``spx run … --serving``) the vLLM benches follow: after every arm and at the
end, ``{"kind": "serving", "serving": {…}}`` (a :class:`~spx.api.serving.ServingResult`) and
``{"kind": "accuracy", "accuracy": {…}}`` (an :class:`~spx.api.accuracy.AccuracyResult`) lines, then with
``spec.serving.step`` after every step server ``{"kind": "step", "step": {…}}`` (a
:class:`~spx.api.step.StepResult`) — the last valid one of each wins — and the termination message's summary
gets their statuses (``serving``, ``accuracy``, ``step``), which stand in when the log cannot be read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from spx.api import wire
from spx.api.accuracy import AccuracyResult, AccuracyStatus
from spx.api.problems import describe_validation_error
from spx.api.result import SUMMARY_MAX_BYTES, SUMMARY_SCHEMA_VERSION, KernelResult, PointResult, ResultSummary
from spx.api.serving import ServingResult, ServingStatus
from spx.api.status import Environment, KernelPoint, KernelStatus
from spx.api.step import StepResult, StepStatus


@dataclass
class Collected:
    """Everything usable from one pod, plus what was wrong (``problems``, one line each)."""

    summary: ResultSummary | None = None
    result: KernelResult | None = None
    partial_points: list[PointResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    serving_result: ServingResult | None = None
    accuracy_result: AccuracyResult | None = None
    step_result: StepResult | None = None

    @property
    def usable(self) -> bool:
        return self.result is not None or self.summary is not None


def read_summary(message: str | None) -> tuple[ResultSummary | None, str | None]:
    """Validate a termination message (:func:`spx.api.wire.parse_summary`) as a :class:`ResultSummary`;
    (summary, None) or (None, problem)."""
    doc, problem = wire.parse_summary(message)
    if doc is None:
        return None, problem
    size = len((message or "").encode())
    version = doc.get("schemaVersion")
    if version != SUMMARY_SCHEMA_VERSION:
        return None, f"termination message: schemaVersion {version!r} is not {SUMMARY_SCHEMA_VERSION!r}"
    try:
        summary = ResultSummary.model_validate(doc)
    except ValidationError as err:
        lines = describe_validation_error(err, "summary")
        return None, "termination message: invalid summary: " + "; ".join(lines[:5])
    if size > SUMMARY_MAX_BYTES:
        return summary, f"termination message: {size} bytes, over the {SUMMARY_MAX_BYTES}-byte limit"
    return summary, None


def read_log(text: str | None) -> tuple[KernelResult | None, list[PointResult], list[str]]:
    """The ``{"kind": "result"}`` document (the last valid one wins) and the point lines of a pod log."""
    if text is None:
        return None, [], ["pod log: not available (the pod or its node is gone, or the log could not be read)"]
    records = wire.parse_log(text)
    result: KernelResult | None = None
    points: list[PointResult] = []
    problems = [p for p in records.problems if '"kind": "result"' in p or '"kind": "point"' in p]
    result_problems: list[str] = []
    for payload in records.of("result"):
        try:
            result = KernelResult.model_validate(payload)
        except ValidationError as err:
            result_problems.append("pod log: invalid result document: "
                                   + "; ".join(describe_validation_error(err, "result")[:5]))
    bad_points = records.bad.get("point", 0)
    for payload in records.of("point"):
        try:
            points.append(PointResult.model_validate(payload))
        except ValidationError:
            bad_points += 1
    if not records.of("result") and not records.bad.get("result"):
        problems.append(f'pod log: no {{"kind": "result"}} line ({len(points)} point line(s) found)')
    if bad_points and not records.bad.get("point"):
        problems.append(f"pod log: {bad_points} point line(s) did not validate")
    elif bad_points > records.bad.get("point", 0):
        problems.append(f"pod log: {bad_points - records.bad['point']} more point line(s) did not validate")
    if result is None:
        problems.extend(result_problems)
    else:  # a valid result line makes broken earlier ones harmless
        problems = [p for p in problems if '"kind": "result"' not in p]
    return result, points, problems


_VLLM_KINDS: dict[str, type[ServingResult] | type[AccuracyResult] | type[StepResult]] = {
    "serving": ServingResult, "accuracy": AccuracyResult, "step": StepResult}


def _vllm_documents(text: str | None) -> tuple[dict[str, Any], list[str]]:
    """The last valid document of each of :data:`_VLLM_KINDS` in a pod log, and one problem per kind whose
    lines are all invalid (truncated, wrong schema); a kind without lines is no problem (the run had no such
    section, or died before its first arm or server ended)."""
    records = wire.parse_log(text)
    found: dict[str, Any] = {}
    bad: dict[str, str] = {}
    for kind, model in _VLLM_KINDS.items():
        if records.bad.get(kind):
            bad[kind] = "not valid JSON (truncated, or non-finite numbers)"
        for payload in records.of(kind):
            try:
                found[kind] = model.model_validate(payload)
                bad.pop(kind, None)
            except ValidationError as err:
                if kind not in found:
                    bad[kind] = "invalid document: " + "; ".join(describe_validation_error(err, kind)[:3])
    return found, [f'pod log: the {{"kind": "{k}"}} line(s): {why}' for k, why in bad.items()]


def read_vllm_log(text: str | None) -> tuple[ServingResult | None, AccuracyResult | None, list[str]]:
    """The last valid ``{"kind": "serving"}`` and ``{"kind": "accuracy"}`` documents of a pod log, and the
    problems of those kinds (:func:`_vllm_documents`)."""
    found, problems = _vllm_documents(text)
    return found.get("serving"), found.get("accuracy"), [p for p in problems if '"step"' not in p]


def read_step_log(text: str | None) -> tuple[StepResult | None, list[str]]:
    """The last valid ``{"kind": "step"}`` document (:class:`~spx.api.step.StepResult`) of a pod log, and a
    problem when its lines are all invalid (:func:`_vllm_documents`)."""
    found, problems = _vllm_documents(text)
    return found.get("step"), [p for p in problems if '"step"' in p]


def collect(termination_message: str | None, log: str | None) -> Collected:
    """Read both channels; a valid full result makes a missing or broken summary harmless and vice versa."""
    summary, summary_problem = read_summary(termination_message)
    result, points, log_problems = read_log(log)
    found, vllm_problems = _vllm_documents(log)
    problems: list[str] = []
    if summary_problem:
        problems.append(summary_problem)
    problems.extend(log_problems)
    problems.extend(vllm_problems)
    return Collected(summary=summary, result=result, partial_points=points, problems=problems,
                     serving_result=found.get("serving"), accuracy_result=found.get("accuracy"),
                     step_result=found.get("step"))


def vllm_statuses(
    collected: Collected,
    summarize_serving: Callable[[ServingResult], ServingStatus],
    summarize_accuracy: Callable[[AccuracyResult], AccuracyStatus],
) -> tuple[ServingStatus | None, AccuracyStatus | None]:
    """``status.serving`` / ``status.accuracy``: the operator's own summary of the full documents from
    the log when there are some, else the pod's (bounded) statuses from the termination message."""
    summary = collected.summary
    serving = (summarize_serving(collected.serving_result) if collected.serving_result is not None
               else summary.serving if summary is not None else None)
    accuracy = (summarize_accuracy(collected.accuracy_result) if collected.accuracy_result is not None
                else summary.accuracy if summary is not None else None)
    return serving, accuracy


def step_status(
    collected: Collected,
    kernel: KernelStatus | None,
    summarize_step: Callable[[StepResult, Any], StepStatus],
    kernel_deltas: Callable[[KernelStatus | None], Any],
) -> StepStatus | None:
    """``status.step``: the operator's own summary of the log's ``step-result.json`` document, its regimes read
    against ``kernel``'s Δg and Δh (``summarize_step(result, kernel_deltas(kernel))``:
    :func:`spx.analysis.step.summarize`, :func:`spx.analysis.step.kernel_deltas`), else the pod's (bounded) status
    from the termination message, else ``None``."""
    if collected.step_result is not None:
        return summarize_step(collected.step_result, kernel_deltas(kernel))
    return collected.summary.step if collected.summary is not None else None


@dataclass(frozen=True)
class Measurement:
    """What the analysis needs, from the full result when there is one, else from the summary."""

    points: list[KernelPoint]
    environment: Environment
    gather_source: str
    gemm_backend: str | None
    timer: str | None
    complete: bool
    error: str | None
    source: str


def measurement(collected: Collected, points_from_result: Any) -> Measurement | None:
    """Pick the best source. ``points_from_result`` is :func:`spx.analysis.points_from_result`."""
    if collected.result is not None:
        r = collected.result
        env = r.environment
        if collected.summary is not None and env.gpu is None:
            env = collected.summary.environment
        return Measurement(list(points_from_result(r)), env, r.gather_source, r.gemm_backend, r.timer,
                           r.complete, r.error, "pod log")
    if collected.summary is not None:
        s = collected.summary
        return Measurement(list(s.points), s.environment, s.gather_source, s.gemm_backend, s.timer,
                           s.complete, s.error, "termination message")
    return None
