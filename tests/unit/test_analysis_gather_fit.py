"""Fitting the all-gather model to measurements."""

import pytest

from spx.analysis.gather_fit import fit_gather_model
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
