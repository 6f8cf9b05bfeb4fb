"""Per-point speed-up intervals: the paired bootstrap, the H20 prior's standard error, the gather band."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from spx.analysis.gather_prior import fit_h20_gather_prior
from spx.analysis.interval import (
    H20_CUSTOM_FIT_STATS,
    Z95,
    bootstrap_speedup,
    gather_band_us,
    h20_gather_se_us,
    point_interval,
    regime_fit_stats,
)
from spx.analysis.reference import parse_kernel_table
from spx.api.gather_model import GatherModelSpec
from spx.api.result import KernelResult

ROOT = Path(__file__).parent.parent.parent
from spx_testing.factories import H20_CSV  # noqa: E402  (the packaged table, the one copy)

DENSE = KernelResult.model_validate(json.loads(
    (ROOT / "examples" / "results" / "h200-1gpu" / "humming-dense" / "result.json").read_text()))


def test_identical_rounds_give_a_zero_width_interval() -> None:
    iv = bootstrap_speedup([20.0] * 10, [10.0] * 10)
    assert (iv.value, iv.low, iv.high) == (2.0, 2.0, 2.0)
    assert not iv.overlaps_one()


def test_pairing_cancels_a_drift_shared_by_the_round() -> None:
    drift = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0]
    rep = [100.0 + 2 * d for d in drift]
    split = [50.0 + d for d in drift]  # every round: exactly 2×
    paired = bootstrap_speedup(rep, split)
    unpaired = bootstrap_speedup(rep, split[:-1])  # different lengths: resampled independently
    assert paired.high - paired.low < 0.25 * (unpaired.high - unpaired.low)
    assert paired.low <= paired.value <= paired.high


def test_the_bootstrap_is_deterministic_and_seeded() -> None:
    rep, split = [10.0, 11.0, 12.0, 9.0, 10.5, 10.2], [9.0, 9.5, 11.0, 9.9, 10.1, 10.3]
    assert bootstrap_speedup(rep, split, seed=3) == bootstrap_speedup(rep, split, seed=3)


@pytest.mark.parametrize(
    ("rep", "split", "kwargs", "message"),
    [
        ([], [1.0], {}, "replicated_us: no samples"),
        ([1.0], [0.0], {}, "split_us: samples must be finite and > 0"),
        ([1.0], [math.nan], {}, "split_us: samples must be finite and > 0"),
        ([1.0], [1.0], {"level": 1.0}, "level must be in (0, 1)"),
        ([1.0], [1.0], {"resamples": 0}, "resamples must be >= 1"),
    ],
)
def test_bootstrap_refuses_bad_input(rep: list[float], split: list[float], kwargs: dict[str, float],
                                     message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bootstrap_speedup(rep, split, **kwargs)  # type: ignore[arg-type]


def test_fit_stats_constant_matches_the_shipped_table() -> None:
    n, s, mean_x, sxx = regime_fit_stats(fit_h20_gather_prior(parse_kernel_table(H20_CSV)))
    cn, cs, cmean, csxx = H20_CUSTOM_FIT_STATS
    assert n == cn == 9
    assert s == pytest.approx(cs, rel=1e-3) and s == pytest.approx(3.454, abs=1e-3)
    assert mean_x == pytest.approx(cmean, rel=1e-4) and sxx == pytest.approx(csxx, rel=1e-4)


def test_prior_standard_error_by_regime() -> None:
    n, s, mean_x, _ = H20_CUSTOM_FIT_STATS
    # at the fit's mean x the prediction SE is s / sqrt(n): choose padded tokens so that 7/8 · M · 1792 · 2 = x̄
    m = round(mean_x / (7 / 8) / (1792 * 2) / 8) * 8
    assert h20_gather_se_us(m, 1792, 2, 8) == pytest.approx(s / math.sqrt(n), rel=0.01)
    assert h20_gather_se_us(96, 1792, 2, 8) > s / math.sqrt(n)  # far from x̄: wider
    assert h20_gather_se_us(8192, 1792, 2, 8) == s  # NCCL regime: the stated stand-in
    assert h20_gather_se_us(96, 1792, 2, 1) == 0.0  # no gather at TP1


def test_gather_band_hulls_the_priors() -> None:
    h20, sheet = GatherModelSpec(prior="h20-calibrated"), GatherModelSpec(prior="datasheet")
    se = h20_gather_se_us(1024, 1792, 2, 8)
    band = gather_band_us(1024, 1792, 2, 8, h20)
    assert band.used_us == pytest.approx(h20.gather_us(1024, 1792, 2, 8))
    assert band.own_high_us - band.own_low_us == pytest.approx(2 * Z95 * se)
    assert band.high_us == pytest.approx(max(sheet.gather_us(1024, 1792, 2, 8), band.own_high_us))
    on_sheet = gather_band_us(1024, 1792, 2, 8, sheet)
    assert on_sheet.own_low_us == on_sheet.own_high_us == on_sheet.used_us  # no fit: no own width
    assert (on_sheet.low_us, on_sheet.high_us) == pytest.approx((band.low_us, band.high_us))


def test_real_h200_point_measured_apart_but_not_with_the_prior() -> None:
    """192 tokens of the dense H200 humming sweep: the samples alone say the split loses (by ~2.4 %);
    the H20 prior's standard error (±~2.6 µs on a ~15 µs split) puts 1.0 inside the interval."""
    p192 = next(p for p in DENSE.points if p.tokens == 192)
    iv = point_interval(p192, DENSE.spec)
    assert iv.measured.value == pytest.approx(0.9762, abs=1e-4)
    assert iv.measured.high < 1.0 and iv.measured.low == pytest.approx(0.962, abs=0.003)
    assert iv.own.overlaps_one() and iv.own.low < iv.measured.low and iv.own.high > iv.measured.high
    assert iv.any_prior.low < iv.own.low  # the datasheet gather is slower
    assert iv.any_prior.high == iv.own.high
    assert iv.gather is not None and iv.gather.used_us == pytest.approx(p192.gather_us)


def test_a_measured_gather_has_only_the_samples_interval() -> None:
    p = DENSE.points[0].model_copy(update={"gather_source": "measured"})
    iv = point_interval(p, DENSE.spec)
    assert iv.own == iv.measured == iv.any_prior and iv.gather is None


def test_a_point_with_a_zero_sample_falls_back_to_its_medians() -> None:
    p = DENSE.points[0]
    zero = p.model_copy(update={"split": p.split.model_copy(update={"samples_us": [0.0, *p.split.samples_us[1:]]})})
    iv = point_interval(zero, DENSE.spec)
    v = p.replicated.median_us / p.split.median_us
    assert (iv.measured.low, iv.measured.high) == (v, v)
    assert iv.own.low < v < iv.own.high  # the prior's uncertainty still applies


def test_bootstrap_difference_is_paired_by_round_and_refuses_bad_samples() -> None:
    from spx.analysis.interval import bootstrap_difference

    rep = [100.0, 140.0, 90.0, 160.0, 120.0]  # a drift shared by both candidates of each round
    shifted = bootstrap_difference(rep, [r - 20.0 for r in rep])
    assert (shifted.value, shifted.low, shifted.high) == (-20.0, -20.0, -20.0)  # paired: no width
    noisy = bootstrap_difference(rep, [130.0, 95.0, 150.0, 105.0, 85.0])
    assert noisy.low < noisy.value < noisy.high and noisy.straddles_zero()
    unpaired = bootstrap_difference(rep, [80.0, 120.0, 70.0, 140.0])  # unequal lengths: resampled apart
    assert unpaired.low <= unpaired.value <= unpaired.high
    assert bootstrap_difference([0.0, 0.0], [5.0, 5.0]).value == 5.0  # a host timer's 0 µs is a time
    with pytest.raises(ValueError, match="split_us: samples must be finite and >= 0"):
        bootstrap_difference(rep, [1.0, -1.0])
    with pytest.raises(ValueError, match="replicated_us: no samples"):
        bootstrap_difference([], [1.0])
