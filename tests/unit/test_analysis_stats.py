"""spx.analysis.stats: quartiles by statistics.quantiles(method="inclusive") (type 7)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from spx.analysis.stats import (
    LEVEL,
    RESAMPLES,
    bootstrap,
    candidate_stats,
    iqr_pct,
    median,
    percentile_interval,
    quantile,
    quartiles,
    resample_indices,
)


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


# --------------------------------------------------------------------------- the one quantile and bootstrap


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([3.0, 1.0, 2.0], 0.5, 2.0),
    ([1.0, 2.0, 3.0, 4.0], 0.25, 1.75),     # type 7: position (n−1)q = 0.75
    ([1.0, 2.0, 3.0, 4.0], 0.0, 1.0),
    ([1.0, 2.0, 3.0, 4.0], 1.0, 4.0),
    ([5.0], 0.3, 5.0),
    ([10.0, 0.0], 0.05, 0.5),
])
def test_quantile_is_type_7(values: list[float], q: float, expected: float) -> None:
    assert quantile(values, q) == pytest.approx(expected)
    assert quantile(values, 0.5) == pytest.approx(statistics.median(values))


@pytest.mark.parametrize(("values", "q", "match"), [([], 0.5, "no values"), ([1.0], 1.5, r"q must be in \[0, 1\]")])
def test_quantile_refuses(values: list[float], q: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        quantile(values, q)


def test_one_count_and_one_level() -> None:
    assert (RESAMPLES, LEVEL) == (2000, 0.95)


def test_resample_indices_are_rng_choices_in_order() -> None:
    draws = list(resample_indices([3, 2], seed=7, resamples=2))
    rng = random.Random(7)
    expected = []
    for _ in range(2):
        a = rng.choices(range(3), k=3)
        expected.append([a, rng.choices(range(2), k=2)])
    assert draws == expected


def test_a_paired_bootstrap_of_a_constant_shift_has_no_width_and_an_independent_one_does() -> None:
    rep = [100.0, 80.0, 140.0, 95.0, 120.0, 70.0]
    shifted = [r - 20.0 for r in rep]
    diff = lambda r, s: statistics.median(s) - statistics.median(r)  # noqa: E731
    paired = bootstrap([rep, shifted], diff, paired=True)
    assert (paired.value, paired.low, paired.high) == (-20.0, -20.0, -20.0)
    independent = bootstrap([rep, shifted], diff, paired=False)
    assert independent.low < -20.0 < independent.high


def test_the_bootstrap_is_seeded_and_brackets_the_sample_median() -> None:
    rng = random.Random(3)
    xs = [rng.gauss(5.0, 1.0) for _ in range(200)]
    iv = bootstrap([xs], statistics.median, paired=True, seed=11)
    assert iv == bootstrap([xs], statistics.median, paired=True, seed=11)
    assert iv.value == statistics.median(xs) and iv.low < iv.value < iv.high and iv.high - iv.low < 0.5
    wider = bootstrap([xs], statistics.median, paired=True, seed=11, level=0.999)
    assert wider.low <= iv.low and wider.high >= iv.high


@pytest.mark.parametrize(("samples", "kwargs", "match"), [
    ([[]], {}, "at least one non-empty sample"),
    ([[1.0], [1.0, 2.0]], {"paired": True}, "one length"),
    ([[1.0]], {"level": 1.0}, r"level must be in \(0, 1\)"),
    ([[1.0]], {"resamples": 0}, "resamples must be >= 1"),
])
def test_the_bootstrap_refuses(samples: list[list[float]], kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bootstrap(samples, lambda *s: 0.0, **{"paired": False, **kwargs})  # type: ignore[arg-type]


def test_percentile_interval_contains_its_value() -> None:
    iv = percentile_interval(10.0, [1.0, 2.0, 3.0], 0.5)
    assert (iv.low, iv.high) == (pytest.approx(1.5), 10.0)
