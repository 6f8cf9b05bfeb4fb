"""The kernel sweep's expected difference over the batch mix, beside its aligned figures. Pure.

The sweep's headline figures are taken at aligned counts (``M % TP == 0``), which 1 batch size in TP forms;
``sp_shard`` pads the whole hidden state for the other ``TP − 1`` (issue #34: at 2049 tokens the split saved
18 µs per layer where it saved 44 at 2048 on an H200). With the off-aligned counts the sweep measures
(``sweep.offAlignment``: ``T + 1``, ``2T + 1``), the expected difference of splitting from ``T`` over the sizes
the deployment forms (up to ``max_num_batched_tokens``) weighs the two curves as the step A/B does
(:mod:`spx.analysis.step_mix`: every size equally likely unless a batch mix is given; each size interpolated
linearly on its own class's counts), once per regime: Δg (GPU-bound) and Δh (host-bound,
eager points; a graph point keeps its Δg, :func:`spx.analysis.regimes.regime_delta`). Its interval puts every
point at its interval's end together (``Σ c·low … Σ c·high``, coefficients ≥ 0): conservative, since the points'
samples are independent and their errors partly cancel. ``aligned_delta_us`` is the same expectation with
every size on the aligned curve: the figure without the pad path, for comparison.

Never extrapolated: the sizes run from ``T`` up to the smaller of ``max_num_batched_tokens`` and the largest
count each class measured (``up_to_tokens``; with the default ``T + 1``, ``2T + 1`` that is ``2T + 1``): the pad
copy grows with ``M`` (issue #34: 24 µs at 2049, 94 µs at 8185), so no off-aligned figure is carried to sizes
the sweep did not reach.
"""

from __future__ import annotations

from collections.abc import Sequence

from spx.analysis.regimes import GPU_BOUND, HOST_BOUND, regime_delta
from spx.analysis.step_mix import expectation_weights
from spx.api.status import KernelMixExpectation, KernelPoint, KernelRegime
from spx.api.step import BatchMixBucket


def kernel_mix_expectation(points: Sequence[KernelPoint], regime: KernelRegime, tp: int, threshold: int,
                           max_batched: int, buckets: Sequence[BatchMixBucket] = ()) -> KernelMixExpectation:
    """The expected difference per layer (µs; negative: the split saves) of splitting from ``threshold`` in
    ``regime`` over the batch mix (module docstring).

    Raises:
        ValueError: no count with this regime's Δ at or below ``max_batched``, no size in range carries weight,
            or a class that carries weight has no measured count (e.g. no off-aligned count: the sweep ran
            without ``sweep.offAlignment``).
    """
    deltas = {d.tokens: d for p in points if p.tokens <= max_batched and (d := regime_delta(p, regime)) is not None}
    if not deltas:
        raise ValueError(f"no measured count up to max_num_batched_tokens={max_batched} carries a {regime} Δ")
    top = min(max_batched, *(max((t for t in deltas if (t % tp == 0) is cls), default=max_batched)
                             for cls in (True, False) if tp > 1 or cls))
    w = expectation_weights(list(deltas), tp, threshold, top, buckets)
    value = sum(c * deltas[t].value for t, c in w.coefficients.items())
    low = sum(c * deltas[t].low for t, c in w.coefficients.items())
    high = sum(c * deltas[t].high for t, c in w.coefficients.items())
    aligned = [t for t in deltas if t % tp == 0]
    aligned_value: float | None = None
    if aligned:
        wa = expectation_weights(aligned, 1, threshold, top, buckets)
        aligned_value = sum(c * deltas[t].value for t, c in wa.coefficients.items())
    return KernelMixExpectation(
        threshold_tokens=threshold, regime=regime, mix=w.mix, pad_path_share=w.pad_path_share, delta_us=value,
        delta_low_us=min(low, value), delta_high_us=max(high, value), aligned_delta_us=aligned_value, up_to_tokens=top,
        off_aligned_tokens=sorted(t for t in deltas if t % tp != 0))


def kernel_mix_expectations(points: Sequence[KernelPoint], tp: int, threshold: int, max_batched: int | None,
                            buckets: Sequence[BatchMixBucket] = (), host: bool = True) -> list[KernelMixExpectation]:
    """:func:`kernel_mix_expectation` in the GPU-bound regime, then the host-bound one (when ``host``: eager points
    carry Δh); a regime whose expectation cannot be formed (no off-aligned count, …) is left out. Empty without
    ``max_batched``."""
    if max_batched is None:
        return []
    out = []
    for regime in (GPU_BOUND, HOST_BOUND) if host else (GPU_BOUND,):
        try:
            out.append(kernel_mix_expectation(points, regime, tp, threshold, max_batched, buckets))
        except ValueError:
            continue
    return out


def mix_expectation_line(e: KernelMixExpectation, layers: int) -> str:
    """One report line on an expectation: per layer, per prefill chunk of ``layers`` layers, and the aligned
    figure beside it (µs per layer; ms per chunk = µs × layers / 1000)."""
    what = "Δg (GPU-bound)" if e.regime == GPU_BOUND else "Δh (host-bound)"
    line = (f"expected {what} of splitting from T={e.threshold_tokens:,} over the batch mix up to "
            f"{e.up_to_tokens:,} tokens ({e.mix}, "
            f"{e.pad_path_share:.0%} of sizes on sp_shard's pad path, off-aligned counts "
            f"{', '.join(f'{t:,}' for t in e.off_aligned_tokens) or 'none'}): {e.delta_us:+.1f} µs per layer "
            f"({e.delta_low_us:+.1f}…{e.delta_high_us:+.1f}), {e.delta_us * layers / 1000:+.2f} ms per prefill chunk")
    if e.aligned_delta_us is not None:
        line += f"; aligned counts alone say {e.aligned_delta_us:+.1f} µs per layer"
    return line
