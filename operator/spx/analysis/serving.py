"""Serving A/B arithmetic: arm thresholds, metric extraction, per-point means and change, the gate.

Pure: no I/O. The change of a point compares the *means* of the variants' arms, as the seed PR did
(``h20_tp8_serving.csv``: arms B1 A1 A2 B2, ``change_pct`` = (mean(B) − mean(A)) / mean(A) × 100):

- Noise before verdict: the arms of one kind (A1 vs A2, B1 vs B2) are compared first. Their spread
  ((max − min) / mean × 100, the larger of the two kinds) is what two servers of the *same* code
  differ by; when it exceeds the between-kind ``|change_pct|``, the point cannot say which kind is
  better and is Inconclusive, with both numbers. The seed's own 1K/1K C1 row is such a case (B1
  338.0 vs B2 334.1 tok/s, a 1.16 % spread, against a +0.25 % change).

- ``change_pct`` > 0 means the split arms' value is larger: better for throughputs, worse for
  latencies (a negative TTFT change is an improvement).
- ``improvement_pct`` is ``change_pct`` signed so that positive is always better.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from spx.api.serving import (
    LATENCY_METRICS,
    METRIC_UNITS,
    SEED_BENCH_BACKEND,
    SEED_BENCH_ENDPOINT,
    SEED_BENCH_SEED,
    THROUGHPUT_METRICS,
    ServingArmSpec,
    ServingArmStatus,
    ServingArmValue,
    ServingGateSpec,
    ServingMetric,
    ServingPointSpec,
    ServingPointStatus,
    ServingResult,
    ServingSpec,
    ServingStatus,
    default_arms,
    seed_points,
)
from spx.api.serving import flag_int as flag_int  # re-exported: defined with the spec it reads (spx.api)
from spx.vocabulary import PLUGIN_THRESHOLD_OFF

#: ``SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS`` of a main arm: the split never happens (the vocabulary's).
OFF = PLUGIN_THRESHOLD_OFF

#: Scalar fields of ``vllm bench serve``'s saved JSON kept in the result document.
SUMMARY_FIELDS: tuple[str, ...] = (
    "duration",
    "completed",
    "failed",
    "num_prompts",
    "max_concurrency",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
)
_LATENCY_STATS = ("mean", "median", "std", "p99")


def arm_threshold(arm: ServingArmSpec, gate_threshold_tokens: int) -> str:
    """The env value an arm runs with: ``off`` for main, else its threshold (default: the gate's)."""
    if arm.variant == "main":
        return OFF
    return str(arm.threshold_tokens if arm.threshold_tokens is not None else gate_threshold_tokens)


def metric_key(metric: ServingMetric) -> str:
    """The saved-JSON key of a metric: ``mean_<m>_ms`` for latencies, the metric itself otherwise."""
    return f"mean_{metric}_ms" if metric in LATENCY_METRICS else metric


def metric_value(saved: Mapping[str, object], metric: ServingMetric) -> float:
    """The compared number of one ``vllm bench serve --save-result`` JSON.

    Raises:
        ValueError: the key is missing or not a finite number (naming the key).
    """
    key = metric_key(metric)
    raw = saved.get(key)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValueError(f"saved result has no numeric {key!r} (got {raw!r})")
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError(f"saved result's {key!r} is not finite ({value})")
    return value


def summary_fields(saved: Mapping[str, object]) -> dict[str, float]:
    """The scalar numbers worth keeping from a saved JSON (throughputs, counts, latency stats)."""
    keys = list(SUMMARY_FIELDS)
    for m in LATENCY_METRICS:
        keys += [f"{stat}_{m}_ms" for stat in _LATENCY_STATS]
    out: dict[str, float] = {}
    for key in keys:
        raw = saved.get(key)
        if isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(float(raw)):
            out[key] = float(raw)
    return out


def mean(values: Sequence[float]) -> float | None:
    """Arithmetic mean, ``None`` for no values."""
    return sum(values) / len(values) if values else None


def change_pct(main: float, split: float) -> float:
    """(split − main) / main × 100.

    Raises:
        ValueError: ``main`` is zero.
    """
    if main == 0:
        raise ValueError("cannot compute a change against a main value of 0")
    return (split - main) / main * 100.0


def improvement_pct(metric: ServingMetric, change: float) -> float:
    """``change`` signed so that positive is better (latencies: lower is better)."""
    return -change if metric in LATENCY_METRICS else change


def gate_point(metric: ServingMetric, change: float | None, gate: ServingGateSpec) -> bool | None:
    """This point's gate check; ``None`` when the metric is not gated or the change is unknown.

    Throughputs need ``change ≥ min_throughput_change_pct``; TTFT needs ``change ≤
    max_ttft_regression_pct``.
    """
    if change is None:
        return None
    if metric in THROUGHPUT_METRICS:
        return change >= gate.min_throughput_change_pct
    if metric == "ttft":
        return change <= gate.max_ttft_regression_pct
    return None


def is_gated(metric: ServingMetric) -> bool:
    """Whether the serving gate looks at this metric (throughputs and TTFT)."""
    return metric in THROUGHPUT_METRICS or metric == "ttft"


def summarize_point(
    name: str, metric: ServingMetric, values: Sequence[ServingArmValue], gate: ServingGateSpec | None = None, *,
    threshold_tokens: int | None = None, max_batch: int | None = None, sampling: Mapping[str, str] | None = None,
) -> ServingPointStatus:
    """Means of the main and split arms' values (failed arms left out), the change and the check.

    ``threshold_tokens``: the split arms' threshold (``values`` hold the split arms of that threshold only);
    ``max_batch``: the largest batch the point forms (:func:`max_batch_tokens`). A point is gated only with a
    noise estimate (two values of each variant: ``within_kind_pct``) and when the split can engage
    (``max_batch`` ≥ the threshold); a *control* point (it cannot) is reported, never gated.
    """
    main = [v.value for v in values if v.variant == "main" and v.value is not None]
    split = [v.value for v in values if v.variant == "split" and v.value is not None]
    main_mean, split_mean = mean(main), mean(split)
    change = None
    if main_mean is not None and split_mean is not None and main_mean != 0:
        change = change_pct(main_mean, split_mean)
    main_spread, split_spread = spread_pct(main), spread_pct(split)
    within = None if main_spread is None or split_spread is None else max(main_spread, split_spread)
    control = threshold_tokens is not None and max_batch is not None and max_batch < threshold_tokens
    undecided = within is None or is_noise(change, within) or control
    return ServingPointStatus(
        name=name,
        metric=metric,
        unit=METRIC_UNITS[metric],
        values=list(values),
        main_mean=main_mean,
        split_mean=split_mean,
        change_pct=change,
        improvement_pct=None if change is None else improvement_pct(metric, change),
        within_kind_pct=within,
        threshold_tokens=threshold_tokens,
        max_batch_tokens=max_batch,
        control=control,
        sampling=dict(sampling or {}),
        passed=None if gate is None or undecided else gate_point(metric, change, gate),
    )


def max_batch_tokens(point: ServingPointSpec, extra_args: Sequence[str]) -> int | None:
    """The largest batch (tokens) a point can form: ``min(concurrency × input_len, --max-num-batched-tokens)``.

    A prefill batch holds at most the prompts in flight (``concurrency`` × ``input_len`` tokens) and at most the
    chunk budget; a decode batch at most ``concurrency`` tokens per step (× (1 + speculative tokens), still far
    below). ``None`` never: the prompts bound it; the budget is read from ``serving.extraArgs`` when given.
    """
    bound = point.concurrency * point.input_len
    budget = flag_int(extra_args, "--max-num-batched-tokens")
    return bound if budget is None else min(bound, budget)


#: ``vllm bench serve`` sampling flags recorded with each point.
SAMPLING_FLAGS: tuple[str, ...] = ("--temperature", "--top-p", "--top-k", "--min-p", "--repetition-penalty")


def sampling_of(extra_bench_args: Sequence[str]) -> dict[str, str]:
    """The sampling a point's requests asked for: the sampling flags of ``serving.extraBenchArgs``, and for a
    missing temperature the server's default (``vllm bench serve`` ≥ 0.33 sends none, so the model's
    generation_config decides: not greedy unless it says so)."""
    out: dict[str, str] = {}
    for i, a in enumerate(extra_bench_args):
        for flag in SAMPLING_FLAGS:
            if a == flag and i + 1 < len(extra_bench_args):
                out[flag.lstrip("-")] = extra_bench_args[i + 1]
            elif a.startswith(flag + "="):
                out[flag.lstrip("-")] = a.split("=", 1)[1]
    out.setdefault("temperature", "server default (none sent: the model's generation_config)")
    return out


def spread_pct(values: Sequence[float]) -> float | None:
    """(max − min) / mean × 100 of the values of one kind's arms; ``None`` with fewer than two values or
    a zero mean."""
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return None if m == 0 else (max(values) - min(values)) / abs(m) * 100.0


def is_noise(change: float | None, within_kind_pct: float | None) -> bool:
    """Whether the between-kind change is within the noise between arms of one kind (spread > ``|change|``)."""
    return change is not None and within_kind_pct is not None and within_kind_pct > abs(change)


def _fmt_change(change: float) -> str:
    return f"{change:+.2f}%"


def _label(p: ServingPointStatus, several: bool) -> str:
    return f"{p.name} (split at T={p.threshold_tokens})" if several else p.name


def gate_reasons(points: Sequence[ServingPointStatus], gate: ServingGateSpec) -> tuple[bool | None, list[str]]:
    """The serving gate over all points: ``(passed, reasons)``.

    Controls (the split cannot engage: every batch below the threshold) are reported, not gated. A gated point
    needs a noise estimate (two servers of each variant); without one it is undecided. Noise first: a point
    whose within-kind spread exceeds its ``|change_pct|`` is undecided (its reason gives both numbers), whatever
    its change. Then ``False`` as soon as one gated point clear of the noise fails its bound; ``None``
    (inconclusive) when a gated point is undecided, or when no point is gated; else ``True``.
    """
    reasons: list[str] = []
    failed = undecided = False
    gated = 0
    several = len({p.threshold_tokens for p in points}) > 1
    for p in points:
        if not is_gated(p.metric):
            continue
        label = _label(p, several)
        if p.control:
            reasons.append(
                f"{label}: control, not gated: its largest batch ({p.max_batch_tokens} tokens) is below the threshold, "
                f"so the split cannot engage" + ("" if p.change_pct is None else
                                                  f" (change {_fmt_change(p.change_pct)}: the A/B's own noise)"))
            continue
        gated += 1
        if p.change_pct is None:
            undecided = True
            reasons.append(f"{label}: no {p.metric} value for one variant; cannot compare")
            continue
        if p.within_kind_pct is None:
            undecided = True
            reasons.append(
                f"{label}: inconclusive: no noise estimate (fewer than two servers of a variant finished), so the "
                f"{_fmt_change(p.change_pct)} {p.metric} change cannot be told from server-to-server noise; run two "
                "arms per variant (the default B1 A1 A2 B2) or the step A/B (spec.serving.step)")
            continue
        if is_noise(p.change_pct, p.within_kind_pct):
            undecided = True
            reasons.append(
                f"{label}: inconclusive: arms of the same kind differ by {p.within_kind_pct:.2f}%, more than the "
                f"{_fmt_change(p.change_pct)} {p.metric} change split vs main; the A/B cannot tell the variants apart here"
            )
            continue
        if p.metric == "ttft":
            ok = p.change_pct <= gate.max_ttft_regression_pct
            bound = f"≤ {gate.max_ttft_regression_pct:+.2f}% allowed TTFT regression"
        else:
            ok = p.change_pct >= gate.min_throughput_change_pct
            bound = f"≥ {gate.min_throughput_change_pct:+.2f}% required throughput change"
        if not ok:
            failed = True
        verdict = "ok" if ok else "FAIL"
        reasons.append(f"{label}: {p.metric} change {_fmt_change(p.change_pct)} split vs main "
                       f"(noise {p.within_kind_pct:.2f}%; {bound}): {verdict}")
    if gated == 0:
        reasons.append("no throughput or TTFT point where the split can engage was measured: nothing to gate")
        return None, reasons
    if failed:
        return False, reasons
    return (None if undecided else True), reasons


#: Said when a CPU serving A/B is kept from deciding.
CPU_SERVING = ("CPU servers: the serving A/B proves the pipeline and decides nothing (set gate.allowCpuTimings to "
               "let a CPU run decide, for pipeline tests)")


def summarize(result: ServingResult, *, allow_cpu_timings: bool = False) -> ServingStatus:
    """``status.serving`` from a (possibly partial) serving result document.

    One point status per point and split threshold (arms with different thresholds are never pooled); a run
    on CPU (``result.device``) leaves the gate undecided unless ``allow_cpu_timings``.
    """
    spec = result.serving
    thresholds: list[str] = []
    for arm in result.arms:
        if arm.variant == "split" and arm.threshold not in thresholds:
            thresholds.append(arm.threshold)
    points: list[ServingPointStatus] = []
    for point in spec.points:
        runs = {arm.name: next((r for r in arm.points if r.point == point.name), None) for arm in result.arms}
        sampling = next((r.sampling for r in runs.values() if r is not None and r.sampling), sampling_of(spec.extra_bench_args))
        for t in thresholds:
            values = [ServingArmValue(arm=a.name, variant=a.variant, value=None if runs[a.name] is None else runs[a.name].value)  # type: ignore[union-attr]
                      for a in result.arms if a.variant == "main" or a.threshold == t]
            t_tokens = int(t) if t.isdigit() else None
            points.append(summarize_point(
                point.name, point.metric, values, spec.gate, threshold_tokens=t_tokens,
                max_batch=max_batch_tokens(point, spec.extra_args), sampling=sampling))
    passed, reasons = gate_reasons(points, spec.gate)
    cpu = result.device == "cpu"
    if cpu and not allow_cpu_timings:
        passed = None
        reasons.insert(0, CPU_SERVING)
    if result.failures:
        reasons.append(f"{len(result.failures)} arm/point failure(s); means use the arms that finished")
    arms = [
        ServingArmStatus(name=a.name, variant=a.variant, threshold=a.threshold, state=a.state, message=a.error)
        for a in result.arms
    ]
    return ServingStatus(
        arms=arms,
        points=points,
        complete=result.complete,
        failures=list(result.failures),
        gate_passed=passed,
        reasons=reasons,
        cpu_timings=cpu,
    )


_PROCESS_PREFIX = re.compile(r"^(?:\([^)]*\)\s*|\[[^\]]*\]\s*)+")
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(?:[A-Z]\w*(?:Error|Exception)|ERROR|CRITICAL)\b[:\s]")


def error_excerpt(log: str, limit: int = 1000, scan_lines: int = 400) -> str | None:
    """The cause of a failure as a server's or a bench's log shows it, bounded to ``limit`` characters.

    Looks at the last ``scan_lines`` lines for exception lines (``SomeError: …``, ``pkg.mod.SomeError:
    …``, as Python tracebacks end) and log records at ``ERROR``/``CRITICAL``; keeps the last three
    distinct ones in order (vLLM often ends with a generic "Engine core initialization failed" after the
    root cause), joined with `` | ``. ``None`` when there is none.
    """
    found: list[str] = []
    for raw in log.splitlines()[-scan_lines:]:
        line = raw.strip()
        body = _PROCESS_PREFIX.sub("", line)  # vLLM prefixes a child process's lines: "(EngineCore_DP0 pid=12) "
        for candidate in (line, body):
            if _ERROR_LINE.match(candidate) or " ERROR " in f" {candidate[:60]} ":
                text = candidate[:500]
                if text in found:
                    found.remove(text)
                found.append(text)
                break
    if not found:
        return None
    excerpt = " | ".join(found[-3:])
    return excerpt if len(excerpt) <= limit else excerpt[: limit - 1] + "…"


def protocol_deviations(spec: ServingSpec) -> list[str]:
    """How ``spec`` departs from the seed PR's serving protocol, one line per field (``[]``: none).

    The seed: ``vllm bench serve --backend openai --endpoint /v1/completions --dataset-name random
    --random-range-ratio 0 --ignore-eos --num-warmups C --seed 1``, arms B1 A1 A2 B2 on fresh servers,
    the seven points of ``h20_tp8_serving.csv`` (:func:`spx.api.serving.seed_points`).
    """
    out: list[str] = []
    if spec.backend != SEED_BENCH_BACKEND:
        out.append(f"backend {spec.backend} (the seed's: {SEED_BENCH_BACKEND})")
    if spec.endpoint != SEED_BENCH_ENDPOINT:
        out.append(f"endpoint {spec.endpoint} (the seed's: {SEED_BENCH_ENDPOINT})")
    if spec.seed != SEED_BENCH_SEED:
        out.append(f"seed {spec.seed} (the seed's: {SEED_BENCH_SEED})")
    if spec.num_warmups is not None:
        out.append(f"numWarmups {spec.num_warmups} (the seed's: each point's concurrency)")
    if spec.extra_bench_args:
        out.append(f"extraBenchArgs {' '.join(spec.extra_bench_args)[:200]}")
    if [(a.name, a.variant) for a in spec.arms] != [(a.name, a.variant) for a in default_arms()]:
        out.append(f"arms {' '.join(f'{a.name}:{a.variant}' for a in spec.arms)} (the seed's: B1:split A1:main A2:main B2:split)")
    seed = {p.name: p for p in seed_points()}
    if [p.name for p in spec.points] != list(seed):
        out.append(f"points {', '.join(p.name for p in spec.points) or '(none)'} (the seed's: {', '.join(seed)})")
    else:
        changed = [p.name for p in spec.points if p != seed[p.name]]
        if changed:
            out.append(f"points {', '.join(changed)} differ from the seed's lengths, concurrency or prompt counts")
    return out
