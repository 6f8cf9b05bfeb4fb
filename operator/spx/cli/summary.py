"""The bounded ``ResultSummary`` of a run (a pod's termination message) and the JSON lines of ``--jsonl``."""

from __future__ import annotations

import math
from typing import Any, TextIO

from spx.api import SUMMARY_MAX_BYTES, Environment, KernelPoint, KernelResult, ResultSummary, dump_model, wire
from spx.api.accuracy import AccuracyStatus
from spx.api.serving import ServingStatus

# ResultSummary: ≤ SUMMARY_MAX_BYTES; environment detail goes first, the points never.
_ENV_KEEP_STEPS: tuple[tuple[str, ...] | None, ...] = (
    None,  # everything but kernel names
    ("gpu", "gpu_count", "compute_capability", "driver", "cuda", "torch", "nccl", "vllm", "device"),
    ("gpu", "gpu_count", "vllm", "device"),
    ("gpu",),
    (),
)


#: Host fields of a point dropped, in this order, when the points still do not fit (issue-16 eager points).
_HOST_DROP_STEPS = (
    ("replicated_host_us", "split_host_us"),
    ("replicated_host_bound_us", "split_host_bound_us", "host_bound_decided", "execution"),
)


def _round_sig(x: float, digits: int) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def _round_point(p: KernelPoint, digits: int) -> KernelPoint:
    return p.model_copy(update={k: _round_sig(v, digits) for k, v in p.__dict__.items() if isinstance(v, float)})


def _compact(model: Any) -> str:
    return wire.dumps(dump_model(model))


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


def build_summary(
    result: KernelResult,
    points: list[KernelPoint],
    max_bytes: int = SUMMARY_MAX_BYTES,
    serving: ServingStatus | None = None,
    accuracy: AccuracyStatus | None = None,
) -> str:
    """Compact JSON of a :class:`ResultSummary` of ``result`` in at most ``max_bytes`` bytes (UTF-8).

    Times are rounded to 6 significant digits. Shrinks in this order until it fits: the serving and
    accuracy sections (:func:`vllm_summary_levels`), environment detail (kernel names are never
    the adaptive sweep's ``addedBecause`` texts, the points' speedup intervals (any-prior ends, then their
    own), environment detail (kernel names are never included), the error text, the points' precision
    (5, 4, 3 significant digits), then the points' host medians and at last their host-bound times — the
    points themselves are always kept.
    Returns the smallest form when even that does not fit.
    """
    env_full = result.environment.model_copy(update={"kernels": []})
    error = result.error[:511] + "…" if result.error and len(result.error) > 512 else result.error
    points = [_round_point(p, 6) for p in points]
    # the adaptive sweep's reasons, then the speedup intervals (any-prior ends, then their own) go
    # before any environment detail: the operator labels its metrics with the GPU
    point_forms = [points]
    for drop in (("added_because",), ("speedup_low_any_prior", "speedup_high_any_prior"), ("speedup_low", "speedup_high")):
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
    for drop in _HOST_DROP_STEPS:  # at last the host detail: the medians, then the host-bound times
        candidates.append(candidates[-1].model_copy(update={
            "points": [p.model_copy(update=dict.fromkeys(drop)) for p in candidates[-1].points]}))
    levels = vllm_summary_levels(serving, accuracy) if serving is not None or accuracy is not None else [(None, None)]
    text = ""
    for cand in candidates:
        for sv, acc in levels:
            text = _compact(cand.model_copy(update={"serving": sv, "accuracy": acc}))
            if len(text.encode()) <= max_bytes:
                return text
    return text


def write_summary(path: str, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8, truncating), e.g. the pod's ``/dev/termination-log``."""
    with open(path, "w", encoding="utf-8") as f:  # also /dev/termination-log
        f.write(text)


def emit_jsonl(stream: TextIO, kind: str, payload: Any) -> None:
    """One bench → operator log line (:func:`spx.api.wire.write_line`: standard JSON, flushed)."""
    wire.write_line(stream, kind, payload)
