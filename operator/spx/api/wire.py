"""The bench → operator wire format: one module writes it, the same module reads it.

A bench pod reports through two channels (``spx run … --summary-file /dev/termination-log --jsonl``):

- its **termination message**: one compact :class:`~spx.api.result.ResultSummary` JSON object of at
  most :data:`SUMMARY_MAX_BYTES` (4096) bytes — the kubelet truncates anything longer
  (``k8s.io/kubernetes/pkg/kubelet/kuberuntime``, ``maxTerminationMessageLogLength``);
- its **log** (stdout): JSON lines ``{"kind": K, K: {...}}`` with ``K`` one of :data:`KINDS` —
  ``point`` (a :class:`~spx.api.result.PointResult`, one per measured token count, as it is measured),
  ``result`` (the whole :class:`~spx.api.result.KernelResult`), ``serving``/``accuracy``/``step`` (the vLLM
  benches' documents: :class:`~spx.api.serving.ServingResult`, :class:`~spx.api.accuracy.AccuracyResult`,
  :class:`~spx.api.step.StepResult`). Other lines (stderr is merged into the pod log) are not ours and are skipped.

The writer emits standard JSON only (RFC 8259): a non-finite float (NaN, ±Infinity — which Python's
``json.dumps`` writes as bare ``NaN``/``Infinity`` tokens no other parser accepts) becomes ``null``,
so the reader's validation names the field. The reader refuses those tokens too (an older bench
wrote them): the line is reported as a problem, never silently turned into a number.

Pure: strings in, plain JSON values out; validation into models is the reader's caller's business
(:mod:`spx.controller.decide.results`). The writer's side of the termination message is here too
(:func:`build_summary`, the bounded :class:`~spx.api.result.ResultSummary` of a run), beside
:func:`parse_summary`, which reads it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TextIO, TypeVar

from pydantic import BaseModel

from spx.api.accuracy import AccuracyStatus
from spx.api.base import dump_model
from spx.api.result import SUMMARY_MAX_BYTES, KernelResult, ResultSummary
from spx.api.serving import ServingStatus
from spx.api.status import Environment, KernelPoint
from spx.api.step import StepStatus

#: Kinds of JSON lines the bench writes to its log.
KINDS: Final = ("point", "result", "serving", "accuracy", "step")
#: Most bytes ``status.step`` takes on the experiment as compact JSON (:func:`fit_step`): the status holds the
#: kernel's points, the serving and accuracy sections and the conditions too, and the whole object must stay
#: well below etcd's 1.5 MiB request limit and readable in ``kubectl get -o yaml``.
STEP_STATUS_MAX_BYTES: Final = 16 * 1024
#: Bytes of a bad line quoted in a problem.
EXCERPT_CHARS: Final = 80

__all__ = [
    "EXCERPT_CHARS", "KINDS", "STEP_STATUS_MAX_BYTES", "SUMMARY_MAX_BYTES", "LogRecords", "NonStandardJSON",
    "build_summary", "dumps", "fit_step", "fit_summary", "line", "loads", "parse_log", "parse_summary",
    "step_levels", "vllm_summary_levels", "write_line",
]


class NonStandardJSON(ValueError):
    """A ``NaN``/``Infinity``/``-Infinity`` token: valid Python ``json``, not JSON (RFC 8259 §6)."""


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) replaced by ``None``, recursively (dicts, lists, tuples)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dumps(value: Any) -> str:
    """Compact standard JSON of a JSON-able value (non-finite floats as ``null``; UTF-8 kept, not escaped)."""
    return json.dumps(finite(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _refuse_constant(token: str) -> Any:
    raise NonStandardJSON(f"{token} is not a JSON number (a non-finite value; the writer must send null)")


def loads(text: str) -> Any:
    """Parse standard JSON.

    Raises:
        NonStandardJSON: the text holds ``NaN``, ``Infinity`` or ``-Infinity``.
        json.JSONDecodeError: it is not JSON at all.
    """
    return json.loads(text, parse_constant=_refuse_constant)


def line(kind: str, payload: Any) -> str:
    """One log line ``{"kind": kind, kind: payload}`` with its newline.

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`.
    """
    if kind not in KINDS:
        raise ValueError(f"wire kind {kind!r} is not one of {', '.join(KINDS)}")
    return dumps({"kind": kind, kind: payload}) + "\n"


def write_line(stream: TextIO, kind: str, payload: Any) -> None:
    """Write :func:`line` to ``stream`` and flush (the operator reads the log while the pod runs)."""
    stream.write(line(kind, payload))
    stream.flush()


def fit_summary(candidates: Iterable[Any], max_bytes: int = SUMMARY_MAX_BYTES) -> str:
    """The first candidate whose :func:`dumps` fits ``max_bytes`` UTF-8 bytes, else the last one cut to fit.

    ``candidates`` go from richest to smallest (JSON-able values). A cut text is no longer JSON: the
    reader reports it as truncated — but it never exceeds what the kubelet keeps.
    """
    text = ""
    for cand in candidates:
        text = dumps(cand)
        if len(text.encode()) <= max_bytes:
            return text
    return text.encode()[:max_bytes].decode(errors="ignore")


# ResultSummary: ≤ SUMMARY_MAX_BYTES; environment detail goes first, the points never.
_ENV_KEEP_STEPS: tuple[tuple[str, ...] | None, ...] = (
    None,  # everything but kernel names
    ("gpu", "gpu_count", "compute_capability", "driver", "cuda", "torch", "nccl", "vllm", "device"),
    ("gpu", "gpu_count", "vllm", "device"),
    ("gpu",),
    (),
)


#: Host fields of a point dropped, in this order, when the points still do not fit (eager points): Δh's
#: interval (the host regime then judges Δh's sign alone), then the host times (one regime is left).
_HOST_DROP_STEPS: tuple[tuple[str, ...], ...] = (
    ("host_delta_low_us", "host_delta_high_us"),
    ("replicated_host_us", "split_host_us", "host_delta_us", "execution"),
)
#: Point fields dropped first, in this order: the adaptive sweep's reasons, Δg (shown, never judged: the
#: GPU regime judges the speed-up and its interval), then the speed-up intervals (any-prior ends, own).
_POINT_DROP_STEPS: tuple[tuple[str, ...], ...] = (
    ("added_because",),
    ("gpu_delta_low_us", "gpu_delta_high_us", "gpu_delta_us"),
    ("speedup_low_any_prior", "speedup_high_any_prior"),
    ("speedup_low", "speedup_high"),
)


def _round_sig(x: float, digits: int) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def _round_point(p: KernelPoint, digits: int) -> KernelPoint:
    return p.model_copy(update={k: _round_sig(v, digits) for k, v in p.__dict__.items() if isinstance(v, float)})


#: Wire keys of a point's IQRs, left out of a summary before its host regime (they default to 0 when read).
_IQR_KEYS = ("iqrPct", "replicatedIqrPct", "splitIqrPct")


def _compact(model: Any, strip: tuple[str, ...] = ()) -> str:
    """Compact JSON of ``model``; ``strip``: keys left out of each of its ``points``."""
    doc = dump_model(model)
    if strip:
        doc["points"] = [{k: v for k, v in p.items() if k not in strip} for p in doc.get("points", [])]
    return dumps(doc)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def vllm_summary_levels(
    serving: ServingStatus | None, accuracy: AccuracyStatus | None
) -> list[tuple[ServingStatus | None, AccuracyStatus | None]]:
    """The serving/accuracy sections of a :class:`ResultSummary`, richest first, each smaller.

    1. everything, with at most 5 failures and 6 reasons of ≤ 200 characters;
    2. reasons dropped, at most 3 failures of ≤ 120 characters;
    3. per-arm values and arm messages dropped (means, change and check per point kept);
    4. points reduced to name, metric, change and check; arms and accuracy runs dropped; failures counted;
    5. only the gate outcomes (``gatePassed``, ``complete``, the accuracy means and drop).
    """
    levels: list[tuple[ServingStatus | None, AccuracyStatus | None]] = []
    s, a = serving, accuracy

    def each(fn_s: Any, fn_a: Any) -> None:
        levels.append((fn_s(s) if s is not None else None, fn_a(a) if a is not None else None))

    each(lambda x: x.model_copy(update={"failures": [_clip(f, 200) for f in x.failures[:5]],
                                        "reasons": [_clip(r, 200) for r in x.reasons[:6]]}),
         lambda x: x.model_copy(update={"reasons": [_clip(r, 200) for r in x.reasons[:6]]}))
    each(lambda x: x.model_copy(update={"failures": [_clip(f, 120) for f in x.failures[:3]], "reasons": []}),
         lambda x: x.model_copy(update={"reasons": []}))
    each(lambda x: x.model_copy(update={
        "failures": [_clip(f, 120) for f in x.failures[:3]], "reasons": [],
        "points": [p.model_copy(update={"values": []}) for p in x.points],
        "arms": [arm.model_copy(update={"message": None}) for arm in x.arms]}),
        lambda x: x.model_copy(update={"reasons": [], "runs": [r.model_copy(update={"error": None}) for r in x.runs]}))
    each(lambda x: x.model_copy(update={
        "failures": [f"{len(x.failures)} failure(s)"] if x.failures else [], "reasons": [], "arms": [],
        "points": [p.model_copy(update={"values": [], "main_mean": None, "split_mean": None, "improvement_pct": None})
                   for p in x.points]}),
        lambda x: x.model_copy(update={"reasons": [], "runs": []}))
    each(lambda x: ServingStatus(complete=x.complete, gate_passed=x.gate_passed,
                                 failures=[f"{len(x.failures)} failure(s)"] if x.failures else []),
         lambda x: AccuracyStatus(main_pct=x.main_pct, split_pct=x.split_pct, drop_points=x.drop_points,
                                  max_drop_points=x.max_drop_points, gate_passed=x.gate_passed))
    return levels


_M = TypeVar("_M", bound=BaseModel)


def _round_model(e: _M, digits: int) -> _M:
    return e.model_copy(update={k: _round_sig(v, digits) for k, v in e.__dict__.items() if isinstance(v, float)})


def _shortened(left_out: list[str]) -> list[str]:
    """The one reason a shortened ``status.step`` keeps: what was left out, and where the rest is."""
    if not left_out:
        return []
    return [_clip(f"shortened to fit ({'; '.join(left_out)} left out); the result ConfigMap's step-result.json "
                  "has every request", 300)]


def step_levels(step: StepStatus, threshold_tokens: int | None = None) -> list[StepStatus]:
    """``status.step`` richest first, each smaller; what goes, in this declared order:

    1. long texts only: at most 8 failures and 12 reasons of ≤ 300 characters, figures to 6 significant digits;
    2. at most 3 failures and 6 reasons of ≤ 160 characters;
    3. the reasons (one line then says what was left out) and the failure texts (counted);
    4. the A/A's and the positive control's per-length points (``usable`` and ``unusableReasons`` keep what they
       said);
    5. the expectations at thresholds other than ``threshold_tokens`` (``None``: none dropped);
    6. the curve's points (``recommendedThresholdTokens`` and ``breakEvenTokens`` keep what it said);
    7. the figures to 3 significant digits (a sign, and so an outcome, never changes).

    What decides (``usable``, the gate threshold's expectations, ``cpuTimings``, ``complete``) is in every level.
    """
    def fails(n: int, chars: int) -> list[str]:
        extra = [f"… {len(step.failures) - n} more failure(s)"] if len(step.failures) > n else []
        return [_clip(f, chars) for f in step.failures[:n]] + extra

    levels = [step.model_copy(update={
        "failures": fails(8, 300), "reasons": [_clip(r, 300) for r in step.reasons[:12]],
        "unusable_reasons": [_clip(r, 300) for r in step.unusable_reasons[:8]],
        "points": [_round_model(e, 6) for e in step.points], "aa": [_round_model(e, 6) for e in step.aa],
        "positive_control": [_round_model(e, 6) for e in step.positive_control],
        "expectations": [_round_model(e, 6) for e in step.expectations]})]
    levels.append(levels[-1].model_copy(update={"failures": fails(3, 160),
                                                "reasons": [_clip(r, 160) for r in step.reasons[:6]]}))
    left_out = [f"{len(step.reasons)} reason(s)"] if step.reasons else []
    counted = [f"{len(step.failures)} failure(s); the first: {_clip(step.failures[0], 120)}"] if step.failures else []
    levels.append(levels[-1].model_copy(update={"failures": counted, "reasons": _shortened(left_out)}))
    if step.aa or step.positive_control:
        left_out.append("the A/A's and the positive control's points")
        levels.append(levels[-1].model_copy(update={"aa": [], "positive_control": [], "reasons": _shortened(left_out)}))
    if threshold_tokens is not None:
        kept = [e for e in levels[-1].expectations if e.threshold_tokens == threshold_tokens]
        if len(kept) < len(step.expectations):
            left_out.append(f"{len(step.expectations) - len(kept)} expectation(s) at thresholds other than the "
                            f"gate's {threshold_tokens}")
            levels.append(levels[-1].model_copy(update={"expectations": kept, "reasons": _shortened(left_out)}))
    if step.points:
        left_out.append(f"the curve's {len(step.points)} point(s)")
        levels.append(levels[-1].model_copy(update={"points": [], "reasons": _shortened(left_out)}))
    last = levels[-1]
    levels.append(last.model_copy(update={"expectations": [_round_model(e, 3) for e in last.expectations]}))
    return levels


def fit_step(step: StepStatus, max_bytes: int = STEP_STATUS_MAX_BYTES, threshold_tokens: int | None = None) -> StepStatus:
    """The first of :func:`step_levels` whose compact JSON fits ``max_bytes`` (UTF-8), else the smallest."""
    levels = step_levels(step, threshold_tokens)
    for level in levels:
        if len(dumps(dump_model(level)).encode()) <= max_bytes:
            return level
    return levels[-1]


def build_summary(
    result: KernelResult,
    points: list[KernelPoint],
    max_bytes: int = SUMMARY_MAX_BYTES,
    serving: ServingStatus | None = None,
    accuracy: AccuracyStatus | None = None,
    step: StepStatus | None = None,
) -> str:
    """Compact JSON of a :class:`ResultSummary` of ``result`` in at most ``max_bytes`` bytes (UTF-8).

    Times are rounded to 6 significant digits. Shrinks in this order until it fits: the adaptive sweep's
    ``addedBecause`` texts, the points' Δg, their speedup intervals (any-prior ends, then their own),
    environment detail (kernel names are never included), the error text, the points' precision (5, 4, 3
    significant digits), Δh's interval, the points' IQRs (``iqrPct``, ``replicatedIqrPct``,
    ``splitIqrPct``: shown, while ``decided`` is kept), and at last the host times and Δh (the host-bound
    regime: without them the summary is judged in one regime); each step with the serving and accuracy
    sections at every level of :func:`vllm_summary_levels` and the step A/B's section at the same level of
    :func:`step_levels` (threshold: the spec's gate threshold), the smallest of each repeated. The points
    themselves are always kept; the step section goes whole only when nothing else fits. The operator judges
    from the pod's full result and documents in its log when it has them; this summary is the fallback.
    Returns the smallest form when even that does not fit.
    """
    env_full = result.environment.model_copy(update={"kernels": []})
    error = result.error[:511] + "…" if result.error and len(result.error) > 512 else result.error
    points = [_round_point(p, 6) for p in points]
    # the adaptive sweep's reasons, then the speedup intervals (any-prior ends, then their own) go
    # before any environment detail: the operator labels its metrics with the GPU
    point_forms = [points]
    drop: tuple[str, ...]
    for drop in _POINT_DROP_STEPS:
        point_forms.append([p.model_copy(update=dict.fromkeys(drop)) for p in point_forms[-1]])
    points = point_forms[-1]

    def summary(env: Environment, pts: list[KernelPoint]) -> ResultSummary:
        return ResultSummary(
            points=pts, environment=env, world_size=result.world_size, gemm_backend=result.gemm_backend,
            gather_source=result.gather_source, timer=result.timer, complete=result.complete, error=error,
        )

    candidates: list[ResultSummary] = [summary(env_full, pts) for pts in point_forms[:-1]]
    for keep in _ENV_KEEP_STEPS:
        env = env_full if keep is None else Environment(**{k: getattr(env_full, k) for k in keep})
        candidates.append(summary(env, points))
    last = candidates[-1]
    for err_len in (200, 80):
        if error and len(error) > err_len:
            candidates.append(last.model_copy(update={"error": error[: err_len - 1] + "…"}))
    last = candidates[-1]
    for digits in (5, 4, 3):
        rounded = [_round_point(p, digits) for p in points]
        candidates.append(last.model_copy(update={"points": rounded}))
    forms: list[tuple[ResultSummary, tuple[str, ...]]] = [(c, ()) for c in candidates]
    interval_dropped = candidates[-1].model_copy(update={
        "points": [p.model_copy(update=dict.fromkeys(_HOST_DROP_STEPS[0])) for p in candidates[-1].points]})
    forms += [(interval_dropped, ()), (interval_dropped, _IQR_KEYS)]
    one_regime = interval_dropped.model_copy(update={
        "points": [p.model_copy(update=dict.fromkeys(_HOST_DROP_STEPS[1])) for p in interval_dropped.points]})
    forms.append((one_regime, _IQR_KEYS))  # at last the host regime
    vllm = vllm_summary_levels(serving, accuracy) if serving is not None or accuracy is not None else [(None, None)]
    steps: list[StepStatus | None] = (
        list(step_levels(step, result.spec.gate.threshold_tokens)) if step is not None else [None])
    levels = [(*vllm[min(i, len(vllm) - 1)], steps[min(i, len(steps) - 1)]) for i in range(max(len(vllm), len(steps)))]
    text = ""
    for cand, strip in forms:
        for sv, acc, st in levels:
            text = _compact(cand.model_copy(update={"serving": sv, "accuracy": acc, "step": st}), strip)
            if len(text.encode()) <= max_bytes:
                return text
    if step is not None:  # at last without the step section: a summary the kubelet keeps whole beats one it cuts
        (cand, strip), (sv, acc) = forms[-1], vllm[-1]
        text = _compact(cand.model_copy(update={"serving": sv, "accuracy": acc, "step": None}), strip)
    return text


def excerpt(text: str, n: int = EXCERPT_CHARS) -> str:
    """A bounded, one-line ``repr`` of ``text`` for problem messages."""
    text = text.strip().replace("\n", "\\n")
    return repr(text[:n] + ("…" if len(text) > n else ""))


def parse_summary(message: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The termination message as a JSON object: ``(doc, None)`` or ``(None, problem)``.

    A message of :data:`SUMMARY_MAX_BYTES` or more that does not parse is reported as truncated by
    the kubelet. Schema validation is the caller's (it knows the model).
    """
    if message is None or not message.strip():
        return None, "termination message: empty (the bench wrote no summary to /dev/termination-log)"
    size = len(message.encode())
    try:
        doc = loads(message)
    except NonStandardJSON as err:
        return None, f"termination message: {err}; starts {excerpt(message)}"
    except json.JSONDecodeError as err:
        # (within a UTF-8 character of the limit: a cut may drop a partial character)
        at_limit = size > SUMMARY_MAX_BYTES - 4
        cut = f" (at the {SUMMARY_MAX_BYTES}-byte limit, so the kubelet truncated it)" if at_limit else ""
        return None, f"termination message: not JSON{cut}: {err.msg} at char {err.pos}; starts {excerpt(message)}"
    if not isinstance(doc, dict):
        return None, f"termination message: expected a JSON object, got {type(doc).__name__}"
    return doc, None


@dataclass
class LogRecords:
    """The bench's lines of a pod log, in order: ``records`` as ``(kind, payload)``; ``problems`` one
    line each for lines that are ours (start with ``{"kind": "<one of KINDS>"``) and do not parse."""

    records: list[tuple[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    bad: dict[str, int] = field(default_factory=dict)

    def of(self, kind: str) -> list[Any]:
        """The payloads of ``kind``, in log order."""
        return [p for k, p in self.records if k == kind]


def _claimed_kind(text: str) -> str | None:
    """The kind a line claims to be, by its first 40 characters (so a truncated line is still ours)."""
    head = text[:40].replace(" ", "")
    for kind in KINDS:
        if head.startswith(f'{{"kind":"{kind}"'):
            return kind
    return None


def parse_log(text: str | None) -> LogRecords:
    """Every bench line of a pod log; garbage (not ours) is skipped, broken lines of ours are problems."""
    out = LogRecords()
    for raw in (text or "").splitlines():
        stripped = raw.strip()
        if not stripped.startswith("{"):
            continue
        kind = _claimed_kind(stripped)
        if kind is None:
            continue
        try:
            obj = loads(stripped)
        except NonStandardJSON as err:
            out.bad[kind] = out.bad.get(kind, 0) + 1
            out.problems.append(f'pod log: a {{"kind": "{kind}"}} line is not standard JSON: {err}; starts {excerpt(stripped)}')
            continue
        except json.JSONDecodeError as err:
            out.bad[kind] = out.bad.get(kind, 0) + 1
            out.problems.append(f'pod log: a {{"kind": "{kind}"}} line is not valid JSON (truncated?): {err.msg}; '
                                f"starts {excerpt(stripped)}")
            continue
        if not isinstance(obj, dict) or obj.get("kind") != kind:
            continue
        payload = obj.get(kind)
        if payload is None and kind == "point":  # an older flat form: {"kind": "point", "tokens": …}
            payload = {k: v for k, v in obj.items() if k != "kind"}
        out.records.append((kind, payload))
    return out
