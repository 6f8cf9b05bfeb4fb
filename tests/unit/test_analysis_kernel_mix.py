"""spx.analysis.kernel_mix: the kernel sweep's expected Δ over the batch mix, beside its aligned figures."""

from __future__ import annotations

import pytest

from spx.analysis.kernel_mix import kernel_mix_expectation, kernel_mix_expectations, mix_expectation_line
from spx.api.status import KernelPoint


def _pt(tokens: int, dg: float, dh: float | None = None, execution: str = "eager") -> KernelPoint:
    return KernelPoint(tokens=tokens, rows_per_rank=-(-tokens // 8), replicated_us=500.0, split_us=500.0 + dg,
                       speedup=500.0 / (500.0 + dg), execution=execution,  # type: ignore[arg-type]
                       gpu_delta_us=dg, gpu_delta_low_us=dg - 2.0, gpu_delta_high_us=dg + 2.0, host_delta_us=dh,
                       host_delta_low_us=None if dh is None else dh - 1.0,
                       host_delta_high_us=None if dh is None else dh + 1.0)


# the H200 figures (µs per layer saved, as Δg): −43.7 at 2048, −18.1 at 2049, −93.6 at 4096, −44.1 at 4097
SWEEP = [_pt(1024, -10.0, 5.0), _pt(2048, -43.7, 6.0), _pt(2049, -18.1, 30.0), _pt(4096, -93.6, 8.0),
         _pt(4097, -44.1, 60.0), _pt(8192, -174.0, 9.0)]


def test_seven_in_eight_sizes_weigh_the_pad_path_curve() -> None:
    e = kernel_mix_expectation(SWEEP, "gpu-bound", 8, 2048, 8192)
    # off-aligned counts reach 4097: the sizes 2048…4097 are weighed, none beyond (never extrapolated)
    assert e.up_to_tokens == 4097 and e.off_aligned_tokens == [2049, 4097]
    assert e.pad_path_share == pytest.approx(1 - 257 / 2050)  # 257 aligned sizes of 2050
    # aligned sizes: the mean of the line −43.7 → −93.6 over 2048…4096; off-aligned: −18.1 → −44.1 over 2049…4097
    aligned_mean, off_mean = (-43.7 - 93.6) / 2, (-18.1 - 44.1) / 2
    assert e.delta_us == pytest.approx(257 / 2050 * aligned_mean + (1 - 257 / 2050) * off_mean, abs=0.05)
    assert e.aligned_delta_us == pytest.approx(aligned_mean, abs=0.05)  # what the aligned figures alone say
    assert e.delta_low_us == pytest.approx(e.delta_us - 2.0) and e.delta_high_us == pytest.approx(e.delta_us + 2.0)


def test_both_regimes_and_the_host_delta() -> None:
    gpu, host = kernel_mix_expectations(SWEEP, 8, 2048, 8192)
    assert (gpu.regime, host.regime) == ("gpu-bound", "host-bound")
    assert host.delta_us > 0 > gpu.delta_us  # the pad copy costs host time: the host-bound regime loses
    assert kernel_mix_expectations(SWEEP, 8, 2048, 8192, host=False) == [gpu]


@pytest.mark.parametrize(("points", "max_batched", "expected"), [
    ([_pt(2048, -40.0), _pt(4096, -90.0)], 8192, []),        # no off-aligned count: no expectation
    (SWEEP, None, []),                                        # no max_num_batched_tokens: nothing to weigh
])
def test_no_expectation_without_off_aligned_counts_or_a_maximum(points: list[KernelPoint], max_batched: int | None,
                                                                expected: list[object]) -> None:
    assert kernel_mix_expectations(points, 8, 2048, max_batched) == expected


def test_an_impossible_expectation_says_why() -> None:
    with pytest.raises(ValueError, match=r"off-aligned .* lengths \[\] do not cover"):
        kernel_mix_expectation([_pt(2048, -40.0), _pt(4096, -90.0)], "gpu-bound", 8, 2048, 8192)
    with pytest.raises(ValueError, match="carries a host-bound"):
        kernel_mix_expectation([_pt(2048, -40.0)], "host-bound", 8, 2048, 8192)


def test_the_report_line_names_the_mix_the_counts_and_the_aligned_figure() -> None:
    line = mix_expectation_line(kernel_mix_expectation(SWEEP, "gpu-bound", 8, 2048, 8192), 40)
    assert line.startswith("expected Δg (GPU-bound) of splitting from T=2,048 over the batch mix up to 4,097 tokens")
    assert "87% of sizes on sp_shard's pad path, off-aligned counts 2,049, 4,097" in line
    assert "ms per prefill chunk; aligned counts alone say -68.7 µs per layer" in line
