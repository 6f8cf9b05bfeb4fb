"""Fitting the all-gather model to measurements."""

import pytest

from spx.analysis.gather_fit import fit_gather_bandwidth, fit_gather_model
from spx.api import GatherModelSpec


def test_recovers_the_parameters_that_generated_the_data():
    model = GatherModelSpec(latency_us=8.5, bus_bandwidth_gbps=300.0)
    sizes = [m * 1792 * 2 for m in (48, 384, 1024, 2048, 4096, 8192, 16384)]
    times = [model.gather_us(b // (1792 * 2), 1792, 2, 8) for b in sizes]
    fit = fit_gather_model(sizes, times, 8)
    assert fit.latency_us == pytest.approx(8.5)
    assert fit.bus_bandwidth_gbps == pytest.approx(300.0)
    assert fit.max_rel_residual == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    ("sizes", "times", "tp", "match"),
    [([100], [1.0], 8, "two distinct"), ([100, 200], [5.0, 4.0], 8, "does not grow"), ([1, 2], [1.0], 8, "sizes but"),
     ([1, 2], [1.0, 2.0], 1, "TP >= 2")],
)
def test_rejects_data_it_cannot_fit(sizes, times, tp, match):
    with pytest.raises(ValueError, match=match):
        fit_gather_model(sizes, times, tp)


def test_residuals_are_measured_minus_modelled_in_input_order():
    sizes = [1000, 2000, 3000]
    fit = fit_gather_model(sizes, [10.0, 13.0, 14.0], 2)  # x = bytes / 2: 500, 1000, 1500
    # least squares: slope 4 µs / 1000 B-of-x = 0.004 µs/B → 250 MB/s; intercept 12.333 − 0.004·1000 = 8.333
    assert fit.latency_us == pytest.approx(25 / 3)
    assert fit.bus_bandwidth_gbps == pytest.approx(0.25)
    assert list(fit.residuals_us) == pytest.approx([-1 / 3, 2 / 3, -1 / 3])
    assert fit.max_rel_residual == pytest.approx((2 / 3) / 13.0)
    assert fit.free_parameters == 2 and fit.points == 3
    assert fit.predicted_us(2000, 2) == pytest.approx(13.0 - 2 / 3)


def test_bandwidth_only_fit_holds_the_latency():
    model = GatherModelSpec(latency_us=6.0, bus_bandwidth_gbps=370.0)
    sizes = [8192 * 1792 * 2]
    fit = fit_gather_bandwidth(sizes, [model.gather_us(8192, 1792, 2, 8)], 8, latency_us=6.0)
    assert (fit.latency_us, fit.free_parameters, fit.points) == (6.0, 1, 1)
    assert fit.bus_bandwidth_gbps == pytest.approx(370.0)
    assert list(fit.residuals_us) == pytest.approx([0.0], abs=1e-9)
    # two sizes, one parameter: least squares Σx(t − L)/Σx², residuals no longer 0
    two = fit_gather_bandwidth([2, 4], [3.0, 4.0], 2, latency_us=1.0)  # x = 1, 2; t − L = 2, 3
    assert two.bus_bandwidth_gbps == pytest.approx(1e6 / (8 / 5) / 1e9)
    assert list(two.residuals_us) == pytest.approx([2 - 8 / 5, 3 - 16 / 5])


@pytest.mark.parametrize(
    ("sizes", "times", "latency", "match"),
    [([], [], 1.0, "at least one"), ([100], [5.0], -1.0, "latency_us must be >= 0"), ([100], [5.0], 6.0, "do not exceed"),
     ([100], [5.0, 6.0], 1.0, "sizes but")],
)
def test_bandwidth_only_fit_rejects(sizes, times, latency, match):
    with pytest.raises(ValueError, match=match):
        fit_gather_bandwidth(sizes, times, 8, latency)
