"""spx.analysis.stats: quartiles by statistics.quantiles(method="inclusive") (type 7)."""

from __future__ import annotations

import math

import pytest

from spx.analysis.stats import candidate_stats, iqr_pct, median, quartiles


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0, 5.0], (2.0, 3.0, 4.0)),
        # n=4, type 7: positions (n-1)p = 0.75, 1.5, 2.25
        ([4.0, 1.0, 3.0, 2.0], (1.75, 2.5, 3.25)),
        ([10.0], (10.0, 10.0, 10.0)),
        ([7.0, 7.0, 7.0], (7.0, 7.0, 7.0)),
        ([1.0, 3.0], (1.5, 2.0, 2.5)),
    ],
)
def test_quartiles_inclusive(samples: list[float], expected: tuple[float, float, float]) -> None:
    assert quartiles(samples) == pytest.approx(expected, abs=1e-12)
    assert median(samples) == pytest.approx(expected[1], abs=1e-12)


@pytest.mark.parametrize(
    ("samples", "expected_pct"),
    [
        ([1.0, 2.0, 3.0, 4.0, 5.0], 2.0 / 3.0 * 100.0),
        ([4.0, 1.0, 3.0, 2.0], 1.5 / 2.5 * 100.0),
        ([10.0], 0.0),
        ([9.0, 10.0, 11.0, 12.0, 13.0], 2.0 / 11.0 * 100.0),
    ],
)
def test_iqr_pct(samples: list[float], expected_pct: float) -> None:
    assert iqr_pct(samples) == pytest.approx(expected_pct, abs=1e-9)


def test_candidate_stats_known_samples_keep_order_and_kernels() -> None:
    samples = [12.0, 10.0, 11.0, 13.0, 9.0]
    stats = candidate_stats(samples, kernels=["sm90_gemm", "ncclAllGather"])
    assert stats.samples_us == samples
    assert (stats.q1_us, stats.median_us, stats.q3_us) == pytest.approx((10.0, 11.0, 12.0))
    assert stats.iqr_pct == pytest.approx(200.0 / 11.0)
    assert stats.kernels == ["sm90_gemm", "ncclAllGather"]


@pytest.mark.parametrize(
    "samples",
    [[], [1.0, -0.5], [1.0, math.nan], [math.inf]],
    ids=["empty", "negative", "nan", "inf"],
)
def test_bad_samples_raise_value_error(samples: list[float]) -> None:
    for fn in (median, quartiles, iqr_pct, candidate_stats):
        with pytest.raises(ValueError):
            fn(samples)


def test_zero_median_has_no_relative_spread() -> None:
    assert quartiles([0.0, 0.0, 0.0]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="median is 0"):
        iqr_pct([0.0, 0.0, 0.0])
