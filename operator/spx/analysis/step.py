"""The step A/B's analysis: requests → per-round differences → difference in differences → effect,
interval, regime and outcome (:class:`spx.api.step.StepEffect`). Pure.

For one threshold ``T`` and one measured length ``L`` (``T``, or ``T + 1``), each server's rounds give a
latency at ``L`` and at ``T − TP``, taken in the same round (interleaved, so a drift of the host moves both
alike). The server's difference is ``Q(L) − Q(T − TP)`` with ``Q`` the ``StepSpec.quantile`` of its rounds
(default 0.5, the median; a lower quantile reads the fast end of each distribution, where a shared host's
interference, which only adds time, is rarest: Chen & Revels 2016, arXiv:1608.04295); the effect is the
treated server's difference minus the control server's: the extra tokens' own cost is in both and cancels,
the split's effect is in the treated server's only. Its 95 % interval is a percentile bootstrap (Efron &
Tibshirani 1993, ch. 13) that resamples each server's rounds independently, with replacement (a round, with
its requests of every length, is the unit), seeded by ``StepSpec.seed``.

A request is used only when the server's ``usage.prompt_tokens`` equals the length asked for: anything else
is a measurement error, named in the status' failures with the round dropped, never silently used (a
tokeniser that added a BOS token would move a "T − TP" prompt across T).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from spx.api.status import KernelStatus
from typing import Any

from spx.api.step import StepOutcome, StepRegime, StepResult, StepStatus

# CONTRACT STUB (session 9): the old several-server analysis below is replaced by the one-server curve (h2)
StepEffect = StepLengthRole = StepServerRun = Any

#: Bootstrap resamples per effect.
BOOTSTRAP_RESAMPLES = 2000
#: Two-sided coverage of the effect's interval.
CONFIDENCE = 0.95
#: Fewest usable rounds per server for an effect.
MIN_ROUNDS = 5

#: The kernel sweep's (Δg, Δh) at a length, µs per layer, either unknown (``None``).
KernelDeltas = Callable[[int], tuple[float | None, float | None]]


def base_length(threshold_tokens: int, tp: int) -> int:
    """``T − TP``: the base request's length (below T on every server).

    Raises:
        ValueError: ``T ≤ TP`` (no base length below the threshold).
    """
    if threshold_tokens <= tp:
        raise ValueError(f"threshold {threshold_tokens} ≤ TP {tp}: the step A/B needs a base of T − TP > 0 tokens")
    return threshold_tokens - tp


def lengths(threshold_tokens: int, tp: int, pad: bool) -> dict[StepLengthRole, int]:
    """The lengths of one round: ``{base: T − TP, split: T, pad: T + 1}`` (``pad`` only with ``pad``)."""
    out: dict[StepLengthRole, int] = {"base": base_length(threshold_tokens, tp), "split": threshold_tokens}
    if pad:
        out["pad"] = threshold_tokens + 1
    return out


@dataclass(frozen=True)
class Rounds:
    """One server's usable rounds for one (T, L): ``(latency(base), latency(L))`` pairs in ms; what was refused."""

    pairs: list[tuple[float, float]]
    refused: list[str]

    @property
    def diffs_ms(self) -> list[float]:
        """``latency(L) − latency(base)`` per round, ms."""
        return [length - base for base, length in self.pairs]


def round_differences(server: StepServerRun, threshold_tokens: int, role: StepLengthRole) -> Rounds:
    """The usable rounds of ``server`` for threshold ``T`` and ``role`` (ms).

    A round is used when both its ``role`` request and its base request answered with
    ``prompt_tokens == length``; otherwise it is refused with a named reason (request error, or a token
    count that differs: a measurement error).
    """
    by_round: dict[int, dict[str, float]] = {}
    refused: list[str] = []
    bad_rounds: set[int] = set()
    for req in server.requests:
        if req.threshold_tokens != threshold_tokens or req.role not in ("base", role):
            continue
        where = f"{server.name} T={threshold_tokens} round {req.round} {req.role} ({req.length} tokens)"
        if req.error is not None or req.latency_ms is None:
            refused.append(f"{where}: request failed: {(req.error or 'no latency')[:200]}")
            bad_rounds.add(req.round)
        elif req.prompt_tokens != req.length:
            refused.append(
                f"{where}: the server counted {req.prompt_tokens} prompt tokens, not {req.length}: measurement error, "
                "round not used")
            bad_rounds.add(req.round)
        else:
            by_round.setdefault(req.round, {})[req.role] = req.latency_ms
    pairs = [(v["base"], v[role]) for r, v in sorted(by_round.items())
             if r not in bad_rounds and "base" in v and role in v]
    return Rounds(pairs=pairs, refused=refused)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0 < q ≤ 1) by linear interpolation between order statistics (Hyndman & Fan 1996
    type 7, NumPy's default), as :mod:`spx.analysis.stats` uses.

    Raises:
        ValueError: no values.
    """
    if not values:
        raise ValueError("no values")
    xs = sorted(values)
    h = (len(xs) - 1) * q
    lo = math.floor(h)
    return xs[lo] if lo + 1 >= len(xs) else xs[lo] + (h - lo) * (xs[lo + 1] - xs[lo])


def did(treated: Sequence[tuple[float, float]], control: Sequence[tuple[float, float]], q: float = 0.5) -> float:
    """The difference in differences of ``q``-quantiles (ms): ``[Q(L) − Q(base)]`` treated − the same on the control.

    ``treated``/``control`` are ``(latency(base), latency(L))`` per round. ``q`` 0.5: the medians; a lower ``q``
    reads the fast end of each distribution, where a shared host's interference (which only adds time) is
    rarest (Chen & Revels 2016, "Robust benchmarking in noisy environments", arXiv:1608.04295).

    Raises:
        ValueError: either is empty.
    """
    if not treated or not control:
        raise ValueError("the difference in differences needs rounds on both servers")

    def diff(pairs: Sequence[tuple[float, float]]) -> float:
        return quantile([x for _, x in pairs], q) - quantile([b for b, _ in pairs], q)

    return diff(treated) - diff(control)


def bootstrap_interval(treated: Sequence[tuple[float, float]], control: Sequence[tuple[float, float]], *, seed: int,
                       q: float = 0.5, resamples: int = BOOTSTRAP_RESAMPLES,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`did`, resampling each server's rounds independently (ms)."""
    rng = random.Random(seed)
    n_t, n_c = len(treated), len(control)
    stats = sorted(
        did([treated[rng.randrange(n_t)] for _ in range(n_t)], [control[rng.randrange(n_c)] for _ in range(n_c)], q)
        for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    lo = stats[max(0, math.floor(tail * resamples))]
    hi = stats[min(resamples - 1, math.ceil((1.0 - tail) * resamples) - 1)]
    return lo, hi


def outcome(low: float, high: float) -> StepOutcome:
    """``gain`` when the interval lies below 0 (the split shortens the step), ``loss`` above, else ``indifferent``."""
    if high < 0:
        return "gain"
    if low > 0:
        return "loss"
    return "indifferent"


def regime(effect: float, low: float, high: float, gpu: float | None, host: float | None) -> StepRegime:
    """Which kernel regime a per-layer step effect matches (all µs per layer).

    ``gpu``/``host`` are the kernel's Δg and Δh at the length. The interval ``[low, high]`` covering both
    → ``undetermined`` (the step cannot tell them apart); covering Δg only → ``gpu-bound``; Δh only →
    ``host-bound``; covering neither and lying between them → ``between`` (the pivot: the step is
    host-bound in some segments, GPU-bound in others); beyond both → the regime of the nearer one (e.g. a
    loss larger than Δh: the host's difference sets the step, plus more). Unknown Δg or Δh →
    ``undetermined``.
    """
    if gpu is None or host is None:
        return "undetermined"
    cover_g, cover_h = low <= gpu <= high, low <= host <= high
    if cover_g and cover_h:
        return "undetermined"
    if cover_g:
        return "gpu-bound"
    if cover_h:
        return "host-bound"
    if min(gpu, host) < low and high < max(gpu, host):
        return "between"
    return "gpu-bound" if abs(effect - gpu) < abs(effect - host) else "host-bound"


def _effect(treated: StepServerRun, control: StepServerRun, t: int, role: StepLengthRole, result: StepResult,
            deltas: KernelDeltas | None) -> tuple[StepEffect | None, list[str]]:
    tp, spec = result.tensor_parallel_size, result.step
    length = lengths(t, tp, True)[role]
    rt, rc = round_differences(treated, t, role), round_differences(control, t, role)
    refused = rt.refused + rc.refused
    if len(rt.pairs) < MIN_ROUNDS or len(rc.pairs) < MIN_ROUNDS:
        refused.append(f"T={t} {role} ({length} tokens): {len(rt.pairs)} usable rounds on {treated.name}, "
                       f"{len(rc.pairs)} on {control.name}; at least {MIN_ROUNDS} each are needed: no effect")
        return None, refused
    eff = did(rt.pairs, rc.pairs, spec.quantile)
    lo, hi = bootstrap_interval(rt.pairs, rc.pairs, seed=spec.seed + t + length, q=spec.quantile)
    per = 1000.0 / spec.layers
    gpu, host = deltas(length) if deltas is not None else (None, None)
    return StepEffect(
        threshold_tokens=t, role=role, length=length, base_length=base_length(t, tp), rounds=len(rt.pairs),
        control_rounds=len(rc.pairs), server=treated.name, effect_ms=eff, effect_low_ms=lo, effect_high_ms=hi,
        layers=spec.layers, per_layer_us=eff * per, per_layer_low_us=lo * per, per_layer_high_us=hi * per,
        kernel_gpu_us=gpu, kernel_host_us=host, regime=regime(eff * per, lo * per, hi * per, gpu, host),
        outcome=outcome(lo, hi),
    ), refused


def describe(e: StepEffect, *, positive_control: bool = False) -> str:
    """One line on an effect: figure, interval, per layer, outcome (and regime)."""
    what = ("positive control (chunk budget T, never splits)" if positive_control
            else f"the split at T={e.threshold_tokens}")
    line = (f"{what}, {e.length} tokens ({e.role}) vs {e.base_length}: {e.effect_ms:+.3f} ms per step "
            f"(95 % interval {e.effect_low_ms:+.3f}…{e.effect_high_ms:+.3f} ms; {e.per_layer_us:+.1f} µs per layer "
            f"over {e.layers}; {e.rounds}+{e.control_rounds} rounds): ")
    if positive_control:
        if e.role == "pad":
            return line + ("detected (a loss beyond its interval)" if e.outcome == "loss" else
                           "NOT detected: this design cannot see one extra prefill step on this deployment")
        return line + e.outcome
    line += {"gain": "a gain beyond its interval", "loss": "a loss beyond its interval",
             "indifferent": "no effect distinguishable from 0 (the interval covers 0)"}[e.outcome]
    if e.kernel_gpu_us is not None and e.kernel_host_us is not None:
        line += f"; against Δg {e.kernel_gpu_us:+.1f} / Δh {e.kernel_host_us:+.1f} µs per layer: {e.regime}"
    return line


def summarize(result: StepResult, deltas: KernelDeltas | None = None,
              kernel_deltas: Mapping[int, tuple[float | None, float | None]] | None = None) -> StepStatus:
    """``status.step`` from a (possibly partial) ``step-result.json``.

    ``deltas`` (or the table ``kernel_deltas``, keyed by length) gives the kernel's Δg and Δh per layer at
    a length, for the regime. Servers that failed or rounds refused are named in ``failures``; an effect
    needs :data:`MIN_ROUNDS` usable rounds on both servers.
    """
    if deltas is None and kernel_deltas is not None:
        table = dict(kernel_deltas)
        deltas = lambda n: table.get(n, (None, None))  # noqa: E731
    control = next((s for s in result.servers if s.role == "control"), None)
    failures = list(result.failures)
    effects: list[StepEffect] = []
    positives: list[StepEffect] = []
    roles: list[StepLengthRole] = ["split", "pad"] if result.step.pad else ["split"]
    if control is None:
        failures.append("no control server ran: no step effect can be computed")
    else:
        for server in result.servers:
            if server.role == "control" or server.threshold_tokens is None:
                continue
            for role in roles:
                eff, refused = _effect(server, control, server.threshold_tokens, role, result, deltas)
                failures.extend(refused)
                if eff is not None:
                    (positives if server.role == "positive-control" else effects).append(eff)
    cpu = result.device == "cpu"
    reasons = [describe(e) for e in effects] + [describe(e, positive_control=True) for e in positives]
    if cpu:
        reasons.insert(0, "CPU servers: these effects prove the measurement, they say nothing about GPUs "
                          "(and the DeepSeek-V4.1 split does not exist in a CPU vLLM)")
    if result.step.positive_control and not any(e.role == "pad" and e.outcome == "loss" for e in positives):
        reasons.insert(0, "the positive control was not detected: an effect of one extra prefill step is within "
                          "this run's noise, so an indifferent split effect says little; add rounds")
    statistic = "median" if result.step.quantile == 0.5 else f"{result.step.quantile:g}-quantile"
    return StepStatus(effects=effects, positive_controls=positives, complete=result.complete and not failures,
                      statistic=statistic, cpu_timings=cpu, failures=failures, reasons=reasons)


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


# TEMP (h1, until h2's spx.analysis.step lands; replaced wholesale by h2's file at the merge): the contract's names
def default_lengths(gate_threshold: int, tp: int, max_batched: int, thresholds: Sequence[int] = ()) -> list[int]:
    """TEMP stand-in of h2's curve: below, at and above each threshold, aligned and off-aligned, ≤ max_batched."""
    out = set()
    for t in [gate_threshold, *thresholds]:
        for n in (t // 2, t - tp, t, t + 1, t + tp, 2 * t):
            if 0 < n <= max_batched:
                out.add(n)
    return sorted(out)


def arms(step: Any) -> list[Any]:
    """TEMP stand-in: every arm (pad-free with step.padFree)."""
    return ["replicated", "split", *(["pad-free"] if step.pad_free else []), "aa", "positive-control"]


def stop_reason(result: StepResult, elapsed_seconds: float) -> str | None:
    """TEMP stand-in: stop at step.rounds or step.budgetSeconds."""
    step = result.step
    if step.budget_seconds is not None and elapsed_seconds >= step.budget_seconds:
        return f"budget: {elapsed_seconds:.0f} s"
    if result.rounds_done >= step.rounds:
        return f"rounds: {result.rounds_done}"
    return None
