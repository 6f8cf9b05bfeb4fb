"""The one-server step A/B's analysis: per-round paired differences → the curve, the calibration, the expected
effect over the batch mix, the stopping rule and whether the step may decide. Pure.

**Effect.** For an arm and a length ``L``, each usable round gives ``d = latency(arm) − latency(replicated)``
(ms per step; negative: the arm shortens the step), both requests sent back to back in the same server, in a
seeded random order (:mod:`spx.analysis.step_rounds` says which rounds are usable and names the others). The
effect is the :attr:`~spx.api.step.StepSpec.statistic` of the ``d`` (default the median: a shared host's
interference slows one request of a pair, a symmetric outlier the median ignores and the mean does not —
``benchmarks/step_power.py`` measures both); per layer it is ``effect × 1000 / layers`` µs.

**Intervals.** One percentile bootstrap over rounds (:func:`spx.analysis.stats.resample_indices`; Efron &
Tibshirani 1993, ch. 13), *jointly over lengths and arms*: a resample draws rounds once and every length's and
arm's statistic is computed on the same rounds, so the expected effect over the batch mix (a fixed linear
combination of the lengths' effects, :mod:`spx.analysis.step_mix`) gets its interval from the same draws.

**Stopping rule** (:func:`stop_reason`; docs/serving.md, "The step A/B's statistics"). The runner looks after
``minRounds`` rounds and then every ``lookEvery`` rounds up to ``rounds``: ``K`` looks
(:func:`looks`). Every interval is taken at level ``1 − α/K`` with ``α = 0.05`` (Bonferroni over the looks), so
the chance that the *gated* interval misses the true effect at *any* look — and hence at the look where the
rounds stop — is at most ``α``: the intervals stay valid whatever look the rule stops at (an unplanned final
look, e.g. a budget or a failure between looks, is covered as long as at most ``K`` looks were taken in all).
One interval is gated: the split's (vLLM's ``sp_shard``) expected effect from the gate threshold over the batch
mix (``expectations[0]``), so no correction across lengths is needed; every other interval (points, the other
thresholds, ``pad-free``, the calibration) is reported at the same per-look level ``1 − α/K`` and is not
simultaneous with it. The rounds stop when the gated interval *excludes* ``±indifferenceMs`` (it contains
neither ``−δ`` nor ``+δ``: a resolved gain below ``−δ``, a resolved loss above ``+δ``, or an effect resolved
within the band), or when the rounds or the wall-clock budget are spent.

**Symmetric.** The gated outcome is one interval's: ``gain`` when it lies below 0, ``loss`` above, else
``indifferent`` — a gain and a loss need the same evidence (the several-server design's asymmetry, where a
gain needed every interval below 0 and a loss one above, is gone).

**Calibration.** The A/A (threshold ``L + 1``: also no split) and the positive control (an injected
``positiveControlMs``) are pooled over their lengths (equal weights, the same joint bootstrap): the A/A's
interval must reach 0 and the positive control's must reach the injected size, each within ``±indifferenceMs``
(a calibration error smaller than the band cannot move a decision taken at the band).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spx.analysis.regimes import match_regime
from spx.analysis.step_mix import break_even, expectation_weights, local_mix_weights
from spx.analysis.step_rounds import PairedRounds, paired_rounds
from spx.analysis.step_stats import (
    ALPHA,
    MIN_ROUNDS,
    ArmBoot,
    bootstrap_arm,
    excludes_band,
    gated_interval,
    interval_level,
    looks,
    outcome,
)
from spx.api.status import KernelStatus
from spx.api.step import StepArm, StepCalibration, StepExpectation, StepPoint, StepResult, StepSpec, StepStatus
from spx.vocabulary import PLUGIN_OFF_TOKENS

#: The threshold that never splits (:data:`spx.vocabulary.PLUGIN_OFF_TOKENS`).
OFF = PLUGIN_OFF_TOKENS
#: The arms of the curve (the calibration arms are summarised apart).
CURVE_ARMS: tuple[StepArm, ...] = ("split", "pad-free")

#: The kernel sweep's (Δg, Δh) at a length, µs per layer, either unknown (``None``).
KernelDeltas = Callable[[int], tuple[float | None, float | None]]


def default_lengths(gate_threshold: int, tp: int, max_batched: int, thresholds: Sequence[int] = ()) -> list[int]:
    """The default curve (tokens, ascending): aligned and off-aligned lengths from below the gate threshold up to
    ``max_batched``, never above.

    Anchors ``T/2`` (rounded down to a multiple of TP), ``T``, ``2T``, ``4T``, … below ``max_batched``, each
    extra threshold in ``thresholds``, and the largest aligned size ``⌊max_batched/TP⌋·TP``; each anchor ``A``
    is measured aligned (``A``, rounded down to a multiple of TP) and off-aligned (``A + 1``: ``sp_shard``'s pad
    path, whose copy does not depend on how many rows it pads); the top also off-aligned at ``max_batched``
    itself when that is not aligned, else at ``max_batched − 1``. TP 1 has no pad path: aligned only.

    Raises:
        ValueError: a non-positive threshold, TP or max_batched.
    """
    if gate_threshold < 1 or tp < 1 or max_batched < 1:
        raise ValueError(f"need gate threshold, TP and max_num_batched_tokens >= 1, got {gate_threshold}, {tp}, "
                         f"{max_batched}")
    top = max_batched // tp * tp
    anchors = {gate_threshold // 2, gate_threshold, *thresholds}
    a = 2 * gate_threshold
    while a < max_batched:
        anchors.add(a)
        a *= 2
    out: set[int] = set()
    for x in anchors:
        al = x // tp * tp
        if al >= tp and al <= top:
            out.add(al)
        if tp > 1 and al >= tp and al + 1 <= max_batched:
            out.add(al + 1)
    if top >= tp:
        out.add(top)
    if tp > 1 and max_batched > tp:
        out.add(max_batched if max_batched % tp else max_batched - 1)
    return sorted(x for x in out if 0 < x <= max_batched)[:64]


def arms(step: StepSpec) -> list[StepArm]:
    """The arms of a round: ``replicated`` (the reference), ``split``, ``pad-free`` (when ``step.padFree``),
    ``aa`` and ``positive-control`` (the calibration, always)."""
    return ["replicated", "split", *(["pad-free"] if step.pad_free else []), "aa", "positive-control"]  # type: ignore[list-item]


def stop_reason(result: StepResult, elapsed_seconds: float) -> str | None:
    """The sequential stopping rule (module docstring), called by the runner after every block of
    ``step.lookEvery`` rounds once ``step.minRounds`` are done: None to go on, else why the rounds stop —
    ``resolved: …`` (the gated interval excludes ±indifferenceMs), ``rounds: …`` (``step.rounds`` done) or
    ``budget: …`` (``step.budgetSeconds`` spent, or the next block would overrun it at the pace so far).

    ``elapsed_seconds``: wall time of the rounds so far (after the model load).
    """
    spec, done = result.step, result.rounds_done
    if done >= spec.min_rounds:
        level = interval_level(spec)
        boot = bootstrap_arm(paired_rounds(result), "split", spec.statistic, seed=spec.seed)
        gated = gated_interval(result, boot, level)
        if not isinstance(gated, str) and excludes_band(gated[1].low, gated[1].high, spec.indifference_ms):
            iv, band = gated[1], spec.indifference_ms
            where = f"within ±{band:g} ms" if -band < iv.low and iv.high < band else f"clear of ±{band:g} ms"
            return (f"resolved: after {done} rounds the split's expected effect from T={result.gate_threshold_tokens} "
                    f"is {iv.value:+.3f} ms per step ({level:.1%} interval {iv.low:+.3f}…{iv.high:+.3f} ms), {where}")
    if done >= spec.rounds:
        return f"rounds: {done} of {spec.rounds} rounds done, the gated interval still reaches ±{spec.indifference_ms:g} ms"
    budget = spec.budget_seconds
    if budget is not None and done > 0:
        pace = elapsed_seconds / done
        if elapsed_seconds >= budget or elapsed_seconds + pace * spec.look_every > budget:
            return (f"budget: {elapsed_seconds:.0f} s of {budget} s spent after {done} rounds; the next "
                    f"{spec.look_every} would take about {pace * spec.look_every:.0f} s more")
    return None




# --------------------------------------------------------------------------- summary


def _point(boot: ArmBoot, length: int, result: StepResult, level: float, deltas: KernelDeltas | None) -> StepPoint:
    iv = boot.interval({length: 1.0}, level)
    per = 1000.0 / result.step.layers
    gpu, host = deltas(length) if deltas is not None and boot.arm == "split" else (None, None)
    return StepPoint(
        arm=boot.arm, length=length, aligned=length % result.tensor_parallel_size == 0, rounds=boot.rounds[length],
        effect_ms=iv.value, effect_low_ms=iv.low, effect_high_ms=iv.high, per_layer_us=iv.value * per,
        per_layer_low_us=iv.low * per, per_layer_high_us=iv.high * per, kernel_gpu_us=gpu, kernel_host_us=host,
        regime=match_regime(iv.value * per, gpu, host, iv.low * per, iv.high * per), outcome=outcome(iv.low, iv.high))


def _calibration(boot: ArmBoot | None, expected: float, band: float, level: float) -> StepCalibration | None:
    if boot is None:
        return None
    iv = boot.interval({x: 1.0 / len(boot.values) for x in boot.values}, level)
    return StepCalibration(arm=boot.arm, expected_ms=expected, lengths=len(boot.values), effect_ms=iv.value,
                           effect_low_ms=iv.low, effect_high_ms=iv.high, passed=iv.covers(expected, band))


def _expectation(boot: ArmBoot, threshold: int, result: StepResult, level: float) -> StepExpectation:
    """Raises ValueError when the mix has no weight at or above ``threshold`` or a class has no length."""
    w = expectation_weights(list(boot.values), result.tensor_parallel_size, threshold, result.max_num_batched_tokens,
                            result.step.batch_mix)
    iv = boot.interval(w.coefficients, level)
    per = 1000.0 / result.step.layers
    return StepExpectation(
        threshold_tokens=threshold, arm=boot.arm, mix=w.mix, pad_path_share=w.pad_path_share, effect_ms=iv.value,
        effect_low_ms=iv.low, effect_high_ms=iv.high, per_layer_us=iv.value * per, per_layer_low_us=iv.low * per,
        per_layer_high_us=iv.high * per, outcome=outcome(iv.low, iv.high))


def thresholds_of(result: StepResult) -> list[int]:
    """The thresholds evaluated: the gate's first, then ``result.thresholds`` / ``step.thresholds``, each once."""
    out = [result.gate_threshold_tokens]
    for t in [*result.thresholds, *result.step.thresholds]:
        if t not in out:
            out.append(t)
    return out


def _expectations(boots: dict[StepArm, ArmBoot], result: StepResult, level: float) -> tuple[list[StepExpectation],
                                                                                            list[str]]:
    out: list[StepExpectation] = []
    why: list[str] = []
    for arm in CURVE_ARMS:
        boot = boots.get(arm)
        if boot is None:
            continue
        for t in thresholds_of(result):
            try:
                out.append(_expectation(boot, t, result, level))
            except ValueError as err:
                why.append(f"{arm} from T={t}: no expected effect: {err}")
    return out, why


def _local(boot: ArmBoot, tp: int, x: int) -> dict[int, float]:
    return local_mix_weights(list(boot.values), tp, x)


def recommended_threshold(boot: ArmBoot, tp: int, level: float) -> int | None:
    """The smallest measured length from which the split's locally mix-weighted effect (``1/TP`` aligned,
    ``(TP − 1)/TP`` pad path, :func:`spx.analysis.step_mix.local_mix_weights`) is a resolved gain (interval below
    0) at every larger measured length — as the kernel sweep's first winning count; None when the largest is not.
    """
    best: int | None = None
    for x in sorted(boot.values, reverse=True):
        if boot.interval(_local(boot, tp, x), level).high >= 0:
            break
        best = x
    return best


def curve_break_even(boot: ArmBoot, tp: int) -> float | None:
    """The step-level break-even (tokens): where the split's locally mix-weighted effect (as
    :func:`recommended_threshold`'s) crosses from loss to gain for the last time."""
    xs = sorted(boot.values)
    ys = [sum(w * boot.values[p] for p, w in _local(boot, tp, x).items()) for x in xs]
    return break_even(xs, ys)



def unusable_reasons(result: StepResult, paired: PairedRounds, calibration: Sequence[StepCalibration], gated: str | None,
                     *, allow_cpu_timings: bool = False, experiment: str | None = None,
                     spec_hash: str | None = None) -> list[str]:
    """Why the step may not decide, most important first (empty: usable). ``gated``: why there is no gated
    interval (None: there is one)."""
    spec, out = result.step, []
    done = max(result.rounds_done, len(paired.rounds))
    if done < spec.min_rounds:
        why = "; ".join(result.failures[:2]) or result.stopped_because or "no reason recorded"
        out.append(f"the server died or the rounds stopped early: {done} of at least {spec.min_rounds} rounds ({why})")
    if gated is not None:
        out.append(f"no gated interval: {gated}")
    bad_switches = sum(1 for s in result.switches if not s.confirmed)
    p = paired.problems
    if bad_switches or p.unconfirmed_switch or p.unconfirmed_forward or not result.server.extension_confirmed:
        out.append(f"the switch is not confirmed: {bad_switches} switch(es) not answered by every worker, "
                   f"{p.unconfirmed_switch} request(s) sent under a switch that does not confirm their arm, "
                   f"{p.unconfirmed_forward} forward(s) that did not do what their arm asked"
                   + ("" if result.server.extension_confirmed else "; the worker extension was not confirmed on "
                      "every worker"))
    if p.token_mismatch:
        out.append(f"{p.token_mismatch} request(s) whose prompt_tokens differ from their length: the prompts are "
                   "not what the curve says")
    checks = {c.arm: c for c in calibration}
    wanted: tuple[tuple[StepArm, float, str], ...] = (
        ("positive-control", spec.positive_control_ms, "the positive control"), ("aa", 0.0, "the A/A"))
    for arm, expected, what in wanted:
        c = checks.get(arm)
        if c is None:
            out.append(f"{what} never ran (no length with {MIN_ROUNDS} usable rounds): the step is not calibrated")
        elif not c.passed:
            out.append(f"{what} failed: {c.effect_ms:+.3f} ms ({c.effect_low_ms:+.3f}…{c.effect_high_ms:+.3f}) does "
                       f"not reach {expected:+g} ms within ±{spec.indifference_ms:g} ms")
    if result.device == "cpu" and not allow_cpu_timings:
        out.append("CPU server: these timings prove the machinery, they say nothing about GPUs "
                   "(gate.allowCpuTimings lets them decide)")
    if experiment is not None and result.experiment != experiment:
        out.append(f"another experiment's step result ({result.experiment!r}, not {experiment!r})")
    if spec_hash is not None and result.spec_hash != spec_hash:
        out.append(f"another spec's step result (spec hash {result.spec_hash!r}, not {spec_hash!r})")
    return out


def _describe_expectation(e: StepExpectation, level: float, layers: int) -> str:
    what = "vLLM's split (sp_shard)" if e.arm == "split" else "the pad-free shard (a proposal for vLLM)"
    return (f"{what} from T={e.threshold_tokens:,} over the batch mix ({e.mix}, {e.pad_path_share:.0%} on the pad path): "
            f"{e.effect_ms:+.3f} ms per step ({level:.1%} interval {e.effect_low_ms:+.3f}…{e.effect_high_ms:+.3f}; "
            f"{e.per_layer_us:+.1f} µs per layer over {layers}): {e.outcome}")


def _describe_point(p: StepPoint, level: float) -> str:
    line = (f"{p.arm} at {p.length:,} tokens ({'aligned' if p.aligned else 'pad path'}, {p.rounds} rounds): "
            f"{p.effect_ms:+.3f} ms per step ({level:.1%} interval {p.effect_low_ms:+.3f}…{p.effect_high_ms:+.3f}; "
            f"{p.per_layer_us:+.1f} µs per layer): {p.outcome}")
    if p.kernel_gpu_us is not None and p.kernel_host_us is not None:
        line += f"; against Δg {p.kernel_gpu_us:+.1f} / Δh {p.kernel_host_us:+.1f} µs per layer: {p.regime}"
    return line


def _reasons(status: StepStatus, result: StepResult) -> list[str]:
    level, layers = status.interval_level, result.step.layers
    out = [_describe_expectation(e, level, layers) for e in status.expectations]
    out += [f"{'A/A' if c.arm == 'aa' else 'positive control'} pooled over {c.lengths} lengths: {c.effect_ms:+.3f} ms "
            f"({c.effect_low_ms:+.3f}…{c.effect_high_ms:+.3f}), expected {c.expected_ms:+g}: "
            f"{'passed' if c.passed else 'FAILED'}" for c in status.calibration]
    if status.break_even_tokens is not None:
        out.append(f"step-level break-even of the split (1/TP aligned, (TP−1)/TP pad path): "
                   f"{status.break_even_tokens:,.0f} tokens")
    if status.recommended_threshold_tokens is not None:
        out.append(f"recommended threshold measured on this deployment: {status.recommended_threshold_tokens:,} tokens")
    out += [_describe_point(p, level) for p in status.points]
    if status.cpu_timings:
        out.insert(0, "CPU server: these effects prove the measurement, they say nothing about GPUs")
    return out


def summarize(result: StepResult, kernel: KernelStatus | None = None, *, allow_cpu_timings: bool = False,
              experiment: str | None = None, spec_hash: str | None = None) -> StepStatus:
    """``status.step`` from a (possibly partial) ``step-result.json`` (method: module docstring).

    ``kernel``: the kernel sweep's status, whose Δg and Δh per layer (:func:`kernel_deltas`) each split point's
    regime is judged against. ``experiment``/``spec_hash``: the experiment this status is for (a result of
    another is unusable). ``result.requests`` must hold the measured rounds only (no warm-up).
    """
    spec, tp = result.step, result.tensor_parallel_size
    level = interval_level(spec)
    paired = paired_rounds(result)
    measured: tuple[StepArm, ...] = ("split", "pad-free", "aa", "positive-control")
    boots = {arm: b for arm in measured if (b := bootstrap_arm(paired, arm, spec.statistic, seed=spec.seed)) is not None}
    deltas = kernel_deltas(kernel)
    calib = [c for c in (_calibration(boots.get("aa"), 0.0, spec.indifference_ms, level),
                         _calibration(boots.get("positive-control"), spec.positive_control_ms, spec.indifference_ms,
                                      level)) if c is not None]
    expectations, why = _expectations(boots, result, level)
    gated = gated_interval(result, boots.get("split"), level)
    split = boots.get("split")
    status = StepStatus(
        points=[_point(boots[a], x, result, level, deltas) for a in CURVE_ARMS if a in boots for x in boots[a].values],
        aa=[_point(boots["aa"], x, result, level, None) for x in boots["aa"].values] if "aa" in boots else [],
        positive_control=[_point(boots["positive-control"], x, result, level, None)
                          for x in boots["positive-control"].values] if "positive-control" in boots else [],
        positive_control_ms=spec.positive_control_ms, calibration=calib, expectations=expectations,
        break_even_tokens=curve_break_even(split, tp) if split is not None else None,
        recommended_threshold_tokens=recommended_threshold(split, tp, level) if split is not None else None,
        complete=result.complete and not result.failures, rounds=max(result.rounds_done, len(paired.rounds)),
        stopped_because=result.stopped_because, statistic=spec.statistic, confidence=1.0 - ALPHA,
        interval_level=level, looks=looks(spec), cpu_timings=result.device == "cpu",
        failures=[*result.failures, *paired.problems.lines(), *why,
                  *([f"lengths {paired.above_max[:8]} lie above max_num_batched_tokens "
                     f"{result.max_num_batched_tokens}: the deployment forms no such batch, not used"]
                    if paired.above_max else [])])
    status.unusable_reasons = unusable_reasons(
        result, paired, calib, gated if isinstance(gated, str) else None, allow_cpu_timings=allow_cpu_timings,
        experiment=experiment, spec_hash=spec_hash)
    status.usable = not status.unusable_reasons
    status.reasons = _reasons(status, result)
    return status


def _interpolate(xs: Sequence[int], ys: Sequence[float], x: int) -> float | None:
    """Linear interpolation of ``ys`` over sorted ``xs`` at ``x``; ``None`` outside ``[xs[0], xs[-1]]``."""
    if not xs or x < xs[0] or x > xs[-1]:
        return None
    for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=False):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1] if x == xs[-1] else None


def kernel_deltas(kernel: KernelStatus | None) -> KernelDeltas | None:
    """The kernel sweep's Δg and Δh per layer at a length (µs), linearly interpolated between measured token
    counts (``None`` outside them or where a point has no figure). Per point: ``gpuDeltaUs``/``hostDeltaUs``
    (:mod:`spx.analysis.regimes`, paired by round) when present, else ``split_us − replicated_us`` and
    ``split_host_us − replicated_host_us``. ``None`` without points."""
    if kernel is None or not kernel.points:
        return None
    pts = sorted(kernel.points, key=lambda p: p.tokens)
    g_x = [p.tokens for p in pts]
    g_y = [p.gpu_delta_us if p.gpu_delta_us is not None else p.split_us - p.replicated_us for p in pts]
    h_x: list[int] = []
    h_y: list[float] = []
    for p in pts:
        if p.host_delta_us is not None:
            h_x.append(p.tokens)
            h_y.append(p.host_delta_us)
        elif p.split_host_us is not None and p.replicated_host_us is not None:
            h_x.append(p.tokens)
            h_y.append(p.split_host_us - p.replicated_host_us)

    def at(n: int) -> tuple[float | None, float | None]:
        return _interpolate(g_x, g_y, n), _interpolate(h_x, h_y, n)

    return at
