"""The words of a judgement: the bottom line, built from the measurement that decided (issue #35, requirement 6).

Pure; called once by :func:`spx.analysis.judge.judge`, stored in ``status.judgement.bottomLine`` and printed by
``spx report`` as it is (so report, status and gate never word a verdict differently). Rules:

- a CPU-decided or CPU-capped result says CPU first;
- the step A/B decided: its expected effect of splitting from ``T`` over the batch mix, and its measured effect at
  ``T`` and ``T + 1`` (the pad path), then the step curve's recommended threshold;
- correctness, deployment: what they found;
- the kernel sweep decided (or nothing did): the stake per prefill chunk at ``T`` (and at the deployment's largest
  batch), ``T + 1``'s speed-up when measured, and the recommended threshold of the deciding measurement (the
  larger of both regimes' where they agree); both regimes' figures and no threshold where they disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from spx.analysis.decide import Decision, step_point
from spx.api.status import KernelPoint, KernelRegime, KernelStatus, RegimeSummary, StakeRow
from spx.api.step import StepStatus

#: A regime as the bottom line names it.
REGIME_NAME: dict[KernelRegime, str] = {"gpu-bound": "GPU-bound", "host-bound": "host-bound"}


def fmt_tokens(value: float | None) -> str:
    """A token count: integral or ≥ 100 without decimals (thousands separated), else one decimal; ``—`` when unknown."""
    if value is None:
        return "—"
    return f"{value:,.0f}" if float(value).is_integer() or value >= 100 else f"{value:.1f}"


def fmt_delta(value: float | None) -> str:
    """A signed difference in µs (split − replicated; negative: the split is shorter): one decimal below 100 µs,
    none from 100 µs (a CPU smoke run's thousands stay narrow); ``—`` when unknown."""
    if value is None:
        return "—"
    return f"{value:+.0f}" if abs(value) >= 100 else f"{value:+.1f}"


def host_deltas_differ(points: Sequence[KernelPoint]) -> bool:
    """Whether some point has a host difference Δh that prints differently from its GPU difference Δg: only
    then are both regimes shown (a CPU smoke run, whose timer is the host, never does)."""
    return any(p.host_delta_us is not None and fmt_delta(p.host_delta_us) != fmt_delta(p.gpu_delta_us)
               for p in points)


def regime_of(kernel: KernelStatus, name: KernelRegime) -> RegimeSummary | None:
    """``kernel``'s summary of regime ``name`` (``gpu-bound`` or ``host-bound``), ``None`` when not judged."""
    return next((r for r in kernel.regimes if r.regime == name), None)


def _effect(saving_ms: float | None) -> str | None:
    """``gains 0.78 ms`` / ``costs 1.04 ms`` of a saving (> 0: the split saves)."""
    if saving_ms is None:
        return None
    return f"{'gains' if saving_ms > 0 else 'costs'} {abs(saving_ms):.2f} ms"


def _recommended(rec: int | None, why: str) -> str:
    return f"recommended threshold {rec:,} tokens ({why})" if rec is not None else "no threshold is recommended"


def step_bottom_line(step: StepStatus, d: Decision, t: int) -> str:
    """The bottom line where the step A/B decided: the expected effect from ``t`` over the batch mix, the effects
    at ``t`` and ``t + 1``, the step curve's recommended threshold."""
    e = d.expectation
    assert e is not None
    verb = {"Pass": "gains", "Fail": "costs"}.get(d.verdict, "moves the step by")
    size = abs(e.effect_ms) if d.verdict in ("Pass", "Fail") else e.effect_ms
    at = [f"{length:,} tokens{'' if p.aligned else ' (pad path)'}: {p.effect_ms:+.2f} ms "
          f"[{p.effect_low_ms:+.2f}, {p.effect_high_ms:+.2f}]"
          for length in (t, t + 1) if (p := step_point(step, length)) is not None]
    measured = f"; measured at {' and '.join(at)}" if at else f"; T = {t:,} and T + 1 = {t + 1:,} not measured alone"
    advice = {"Pass": f"threshold {t:,} stands", "Fail": f"do not split from {t:,}"}.get(
        d.verdict, f"within the noise at {t:,}: neither a gain nor a loss")
    rec = _recommended(d.recommended_threshold_tokens, "the step curve's: the smallest measured length from which "
                       "splitting is a resolved expected gain")
    return (f"bottom line: on this node the step A/B measured that splitting from T = {t:,} tokens {verb} "
            f"{size:.2f} ms per prefill step expected over the {e.mix} batch mix, interval [{e.effect_low_ms:+.2f}, "
            f"{e.effect_high_ms:+.2f}] ms ({e.per_layer_us:+.1f} µs per layer){measured}; {advice}; {rec}")


def _t1_line(kernel: KernelStatus, t: int) -> str:
    p = next((p for p in kernel.points if p.tokens == t + 1), None)
    if p is None:
        return f"T + 1 = {t + 1:,} (the pad path) not measured"
    return f"at T + 1 = {t + 1:,} (the pad path) the speed-up is {p.speedup:.2f}×"


def _stake_at(kernel: KernelStatus, tokens: float) -> StakeRow | None:
    u = kernel.uncertainty
    return None if u is None else next((r for r in u.stake if abs(r.tokens - tokens) < 1e-6), None)


def _full_chunk(kernel: KernelStatus, t: int, layers: int, host: bool) -> StakeRow | None:
    """The stake at the deployment's largest batch when it is above ``t`` and inside the measured range."""
    from spx.analysis.band import stake_at

    m = kernel.max_num_batched_tokens
    if m is None or m <= t:
        return None
    row = stake_at(kernel.points, "largest batch", float(m), layers, host=host)
    return row if row.saving_ms_per_chunk is not None else None


def _regime_effect(row: StakeRow, full: StakeRow | None, *, host: bool, first: bool) -> str:
    at = _effect(row.host_saving_ms_per_chunk if host else row.saving_ms_per_chunk)
    full_effect = _effect(full.host_saving_ms_per_chunk if host else full.saving_ms_per_chunk) if full else None
    if not first:
        return f"{at}" + (f" and {full_effect}" if full_effect else "")
    text = f"{at} per {row.tokens:,.0f}-token prefill chunk"
    if full is not None and full_effect:
        text += f" and {full_effect} per full {full.tokens:,.0f}-token chunk"
    return text


def kernel_bottom_line(kernel: KernelStatus, d: Decision, t: int) -> str:
    """The bottom line from the kernel sweep's stake at ``t`` (and at the largest batch), ``t + 1``'s speed-up and
    the deciding recommendation; both regimes' figures where they differ."""
    row = _stake_at(kernel, t)
    if row is None or row.saving_ms_per_chunk is None:
        return f"bottom line: the sweep does not reach the gate threshold (T = {t:,} tokens): no stake there"
    host_shown = host_deltas_differ(kernel.points) and row.host_saving_ms_per_chunk is not None
    gpu = _regime_effect(row, _full_chunk(kernel, t, row.layers, False), host=False, first=True)
    modelled = "; gather modelled" if kernel.gather_source == "modelled" else ""
    where = f"on this node ({row.layers} layers{modelled}) the split at T = {t:,} tokens"
    t1 = _t1_line(kernel, t)
    if d.decided_by == "kernel":
        basis = "both regimes agree; the split wins in both from there" if host_shown else "the GPU-bound regime's"
        rec = _recommended(d.recommended_threshold_tokens, basis)
    else:
        recs = ", ".join(f"{REGIME_NAME[r.regime]} alone: "
                         + (fmt_tokens(r.recommended_threshold_tokens) if r.recommended_threshold_tokens else "none")
                         for r in kernel.regimes)
        rec = f"no threshold is recommended until a measurement decides ({recs})" if recs else _recommended(None, "")
    if not host_shown:
        return f"bottom line: {where} {gpu}; {t1}; {rec}"
    host = _regime_effect(row, _full_chunk(kernel, t, row.layers, True), host=True, first=False)
    return f"bottom line: {where} {gpu} if the step is GPU-bound, and {host} if it is host-bound; {t1}; {rec}"


def bottom_line(kernel: KernelStatus | None, d: Decision, t: int, *, step: StepStatus | None = None,
                cpu: bool = False) -> str:
    """The bottom line of a judgement (module docstring); ``kernel`` ``None``: the vLLM benches alone."""
    head = "CPU smoke run: " if cpu else ""
    if d.decided_by == "step" and step is not None and d.expectation is not None:
        return head + step_bottom_line(step, d, t).removeprefix("bottom line: " if cpu else "")
    if cpu:
        return "CPU smoke run: no bottom line about GPUs (it proves the pipeline; its timings say nothing about GPUs)"
    if d.decided_by == "correctness":
        return "bottom line: the split's output differs from the replicated one beyond gate.maxAbsError: do not split"
    if d.decided_by == "deployment" and kernel is not None and kernel.max_num_batched_tokens is not None:
        return (f"bottom line: T = {t:,} tokens lies above the largest batch this deployment forms "
                f"({kernel.max_num_batched_tokens:,} tokens): the split would never engage")
    if kernel is None or not kernel.points:
        return f"bottom line: no measurement of the split at T = {t:,} and T + 1 = {t + 1:,} tokens decided"
    return kernel_bottom_line(kernel, d, t)


#: The step that settles a verdict resting on a modelled gather.
GATHER_NEXT = ("measure the all-gather: run the sweep on as many GPUs of one node as tensorParallelSize "
               "(kernel.gather auto measures it there), or accept the model with gate.allowModelledGather")


def next_step(kernel: KernelStatus | None, d: Decision, t: int) -> str | None:
    """The next step where nothing decided: the deciding rule's own (:attr:`Decision.next_step`: the step A/B, or a
    threshold the deployment reaches); else extend a sweep that stops below ``t``; else measure a modelled gather."""
    if d.next_step or d.decided_by != "none" or kernel is None:
        return d.next_step
    largest = max((p.tokens for p in kernel.points), default=None)
    if largest is not None and largest < t:
        return (f"extend the sweep to the gate threshold: add {t} (and larger counts, up to the deployment's largest "
                f"batch) to sweep.tokens; the largest measured is {largest:,}")
    if kernel.gather_source == "modelled":
        return GATHER_NEXT
    return None
