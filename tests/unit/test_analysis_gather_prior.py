"""The all-gather derived from the seed's 8× H20 table, its per-regime fit, and the prior built on it.

Every value is computed from the real published table (``operator/spx/data/h20_tp8_fused_wqa_wkv.csv``).
Tolerance of the fitted values: the table writes µs to 0.1, so a fitted parameter is only known to
the worst-case effect of ±0.05 µs on every time (``rounding_sensitivity``: 0.11 µs / 2.7 GB/s for
the custom regime, 0.30 µs / 1.1 GB/s for NCCL). A change of the derivation smaller than that is
indistinguishable from the data's own rounding; a larger one is a real change and fails.
"""

from __future__ import annotations

import math
import re

import pytest
from pydantic import ValidationError

from spx.analysis.gather_prior import (
    DerivedGather,
    derive_gather,
    fit_gather_prior,
    fit_h20_gather_prior,
    rounding_sensitivity,
)
from spx.analysis.predict import predict_from_table
from spx.analysis.reference import parse_kernel_table
from spx.api.gather_model import CUSTOM_ALL_GATHER_MAX_SHARD_BYTES, H20_GATHER_PRIOR, GatherModelSpec
from spx.api.spec import ExperimentSpec
from spx.cli import EXIT_OK, main
from spx_testing.factories import H20_CSV

POINTS = parse_kernel_table(H20_CSV)
N, BF16 = 1792, 2


@pytest.fixture(scope="module")
def sensitivity() -> dict[str, tuple[float, float]]:
    return dict(rounding_sensitivity(POINTS))


# ---------------------------------------------------------------- derivation


def _loglog(x: float, x0: float, y0: float, x1: float, y1: float) -> float:
    return y0 * (y1 / y0) ** (math.log(x / x0) / math.log(x1 / x0))


@pytest.mark.parametrize(
    ("tokens", "rows", "shard_us", "held", "regime"),
    [
        (6, 1, 14.1, True, "custom"),  # below the table's 6 tokens: held at 14.1 µs
        (12, 2, 14.1, True, "custom"),
        (24, 3, 14.1, True, "custom"),
        (48, 6, 14.1, False, "custom"),  # 6 rows is a table row
        (96, 12, 14.6, False, "custom"),
        (384, 48, 25.9, False, "custom"),
        (1024, 128, _loglog(128, 96, 49.6, 384, 99.7), False, "custom"),
        (2048, 256, _loglog(256, 96, 49.6, 384, 99.7), False, "custom"),
        (4096, 512, _loglog(512, 384, 99.7, 1024, 239.4), False, "custom"),  # 1.75 MiB shard
        (8192, 1024, 239.4, False, "nccl"),  # 3.5 MiB shard
        (16384, 2048, 458.5, False, "nccl"),
    ],
)
def test_gather_is_split_total_minus_interpolated_shard_gemm(tokens, rows, shard_us, held, regime) -> None:
    d = {g.tokens: g for g in derive_gather(POINTS)}[tokens]
    split = {p.tokens: p.split_us for p in POINTS}[tokens]
    assert (d.shard_rows, d.shard_gemm_held, d.regime) == (rows, held, regime)
    assert d.shard_gemm_us == pytest.approx(shard_us)
    assert d.gather_us == pytest.approx(split - shard_us)
    assert d.shard_bytes == rows * N * BF16 and d.total_bytes == 8 * rows * N * BF16


def test_the_table_has_two_nccl_points_only() -> None:
    # The README says NCCL "from 6144 tokens", but the table has no 6144 row: 8192 and 16384 only.
    derived = derive_gather(POINTS)
    assert [d.tokens for d in derived if d.regime == "nccl"] == [8192, 16384]
    assert [d.tokens for d in derived if d.regime == "custom"] == [6, 12, 24, 48, 96, 384, 1024, 2048, 4096]


def test_derivation_rejects_a_table_of_another_tp_or_split_below_shard() -> None:
    with pytest.raises(ValueError, match="not measured at TP4"):
        derive_gather(POINTS, tp=4)
    text = H20_CSV.replace("8192,1024,1794.7,346.9,5.17", "8192,1024,1794.7,200.0,8.97")
    with pytest.raises(ValueError, match="8192 tokens: split total 200.0 µs is below"):
        derive_gather(parse_kernel_table(text))


# ---------------------------------------------------------------- the fit on the real table


def test_fitted_parameters_per_regime(sensitivity) -> None:
    fit = fit_h20_gather_prior(POINTS)
    (lat_c, bw_c), (lat_n, bw_n) = fit.parameters()["custom"], fit.parameters()["nccl"]
    (dlat_c, dbw_c), (dlat_n, dbw_n) = sensitivity["custom"], sensitivity["nccl"]
    assert lat_c == pytest.approx(6.121, abs=dlat_c) and bw_c == pytest.approx(371.99, abs=dbw_c)
    assert lat_n == pytest.approx(38.10, abs=dlat_n) and bw_n == pytest.approx(370.17, abs=dbw_n)
    # the tolerance itself is small: the table's rounding cannot hide a real change
    assert dlat_c < 0.2 and dbw_c < 3.0 and dlat_n < 0.5 and dbw_n < 1.5


def test_spec_constants_are_the_fit_rounded(sensitivity) -> None:
    fit = fit_h20_gather_prior(POINTS).parameters()
    for regime, (lat, bw) in H20_GATHER_PRIOR.items():
        assert abs(lat - fit[regime][0]) <= sensitivity[regime][0], regime
        assert abs(bw - fit[regime][1]) <= sensitivity[regime][1], regime


def test_residuals_of_the_custom_regime() -> None:
    rf = fit_h20_gather_prior(POINTS).regimes["custom"]
    assert rf.method == "least squares" and rf.fit.points == 9
    assert list(rf.fit.residuals_us) == pytest.approx([2.91, 2.74, 0.68, -0.33, -0.03, 0.54, -5.29, -4.97, 3.74], abs=0.01)
    assert rf.fit.max_rel_residual == pytest.approx(5.29 / 9.47, abs=0.005)  # 1024 tokens, 56 %
    assert sum(rf.fit.residuals_us) == pytest.approx(0.0, abs=1e-9)  # least squares with an intercept


def test_nccl_regime_is_exactly_determined_and_agrees_with_the_custom_bandwidth() -> None:
    fit = fit_h20_gather_prior(POINTS)
    nccl, custom = fit.regimes["nccl"], fit.regimes["custom"]
    assert nccl.fit.points == nccl.fit.free_parameters == 2 and "exact" in nccl.method
    assert list(nccl.fit.residuals_us) == pytest.approx([0.0, 0.0], abs=1e-9)
    # the independent check: the same NVLink, so the same bus bandwidth as the custom regime's 9-point fit
    assert nccl.fit.bus_bandwidth_gbps == pytest.approx(custom.fit.bus_bandwidth_gbps, rel=0.01)
    assert nccl.fit.latency_us > 5 * custom.fit.latency_us  # NCCL's fixed cost is the custom path's ~6×


def test_linear_interpolation_moves_only_the_custom_regime() -> None:
    lin = fit_h20_gather_prior(POINTS, interpolation="linear").parameters()
    assert lin["custom"] == pytest.approx((6.430, 347.97), abs=0.01)
    assert lin["nccl"] == pytest.approx(fit_h20_gather_prior(POINTS).parameters()["nccl"])  # table rows, exact


# ---------------------------------------------------------------- fitting other tables


def _derived(tokens: int, gather_us: float, regime: str) -> DerivedGather:
    rows = tokens // 8
    return DerivedGather(tokens, tokens, rows, rows * N * BF16, tokens * N * BF16, 0.0, 0.0, False, gather_us, regime)  # type: ignore[arg-type]


def test_a_regime_with_one_size_fits_its_bandwidth_with_the_other_latency() -> None:
    truth = GatherModelSpec(latency_us=7.0, bus_bandwidth_gbps=350.0)
    ds = [_derived(t, truth.gather_us(t, N, BF16, 8), "custom") for t in (96, 1024, 4096)]
    ds.append(_derived(8192, truth.gather_us(8192, N, BF16, 8), "nccl"))
    fit = fit_gather_prior(ds)
    assert fit.parameters()["custom"] == pytest.approx((7.0, 350.0))
    assert fit.parameters()["nccl"] == pytest.approx((7.0, 350.0))
    assert fit.regimes["nccl"].method == "bandwidth only, latency of the custom regime"


@pytest.mark.parametrize(
    ("ds", "match"),
    [
        ([_derived(96, 7.0, "custom"), _derived(1024, 15.0, "custom")], "no nccl all-gather point"),
        ([_derived(96, 7.0, "custom"), _derived(8192, 100.0, "nccl")], "each regime has a single size"),
        ([_derived(96, 9.0, "custom"), _derived(1024, 8.0, "custom"), _derived(8192, 100.0, "nccl")],
         "custom regime: all-gather time does not grow"),
    ],
)
def test_fit_errors_name_the_regime(ds, match) -> None:
    with pytest.raises(ValueError, match=match):
        fit_gather_prior(ds)


# ---------------------------------------------------------------- GatherModelSpec


def test_default_prior_is_h20_calibrated_per_regime() -> None:
    m = GatherModelSpec()
    assert m.prior == "h20-calibrated" and m.custom_all_gather_max_shard_bytes == CUSTOM_ALL_GATHER_MAX_SHARD_BYTES
    assert ExperimentSpec().kernel.gather_model == m
    # 4096 tokens: custom, 6.1 µs + 7/8 · 4096·1792·2 B / 372 GB/s; 8192: NCCL, 38.1 µs + … / 370 GB/s
    assert m.gather_us(4096, N, BF16, 8) == pytest.approx(6.1 + 7 / 8 * 4096 * N * BF16 / 372e3)
    assert m.gather_us(8192, N, BF16, 8) == pytest.approx(38.1 + 7 / 8 * 8192 * N * BF16 / 370e3)
    assert m.gather_us(8192, N, BF16, 1) == 0.0


@pytest.mark.parametrize(
    ("padded", "limit", "regime"),
    [(4680, CUSTOM_ALL_GATHER_MAX_SHARD_BYTES, "custom"),  # 585 rows · 3584 B = 2,096,640 B ≤ 2 MiB
     (4688, CUSTOM_ALL_GATHER_MAX_SHARD_BYTES, "nccl"),  # 586 rows: 2,100,224 B
     (8, 0, "nccl"),  # limit 0: custom all-gather off, always NCCL
     (8, 3584, "custom")],
)
def test_regime_follows_the_padded_shard_bytes(padded: int, limit: int, regime: str) -> None:
    assert GatherModelSpec(custom_all_gather_max_shard_bytes=limit).regime(padded, N, BF16, 8) == regime


def test_datasheet_prior_is_one_regime() -> None:
    m = GatherModelSpec(prior="datasheet")
    assert m.parameters("custom") == m.parameters("nccl") == (10.0, 360.0)
    assert m.gather_us(2048, N, BF16, 8) == pytest.approx(10 + 7 / 8 * 2048 * N * BF16 / 360e3)
    assert m.describe() == "datasheet prior: 10 µs + (TP-1)/TP x bytes / 360 GB/s"


@pytest.mark.parametrize("prior", ["h20-calibrated", "datasheet"])
def test_explicit_parameters_override_every_regime(prior: str) -> None:
    # Both given: the single formula of earlier spx versions, whatever the prior (old files keep their meaning).
    old = GatherModelSpec.model_validate({"prior": prior, "latencyUs": 8.5, "busBandwidthGbps": 300.0})
    for tokens in (48, 4096, 8192):
        assert old.gather_us(tokens, N, BF16, 8) == pytest.approx(8.5 + 7 / 8 * tokens * N * BF16 / 300e3)
    one = GatherModelSpec.model_validate({"prior": prior, "latencyUs": 5.0})
    assert one.parameters("custom")[0] == one.parameters("nccl")[0] == 5.0
    assert one.parameters("nccl")[1] == (370.0 if prior == "h20-calibrated" else 360.0)
    assert "explicit latencyUs/busBandwidthGbps" in one.describe()


def test_an_old_spec_file_still_validates_with_its_old_numbers() -> None:
    spec = ExperimentSpec.model_validate({"kernel": {"gatherModel": {"latencyUs": 10.0, "busBandwidthGbps": 360.0}}})
    m = spec.kernel.gather_model
    assert m.gather_us(8192, N, BF16, 8) == GatherModelSpec(prior="datasheet").gather_us(8192, N, BF16, 8)


@pytest.mark.parametrize(
    ("wire", "field"),
    [({"prior": "h200"}, "prior"), ({"latencyUs": -1.0}, "latencyUs"), ({"busBandwidthGbps": 0.0}, "busBandwidthGbps"),
     ({"customAllGatherMaxShardBytes": -1}, "customAllGatherMaxShardBytes"), ({"latency": 5.0}, "latency")],
)
def test_bad_gather_model_names_the_field(wire: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        GatherModelSpec.model_validate(wire)


# ---------------------------------------------------------------- spx predict with a modelled gather


def test_predict_keeps_the_seed_figures_by_default_and_takes_a_gather_model() -> None:
    seed = predict_from_table(H20_CSV)
    assert seed.break_even_tokens == pytest.approx(1266.23, abs=0.01)  # unchanged: the H20 gather
    assert all(r.gather_us == r.h20_gather_us for r in seed.rows)
    cal = predict_from_table(H20_CSV, gather_model=GatherModelSpec())
    assert cal.break_even_tokens == pytest.approx(1715.1, abs=0.1) and cal.recommended_threshold_tokens == 2048
    assert {r.tokens: r.gather_us for r in cal.rows}[8192] == pytest.approx(107.53, abs=0.01)
    assert "h20-calibrated prior" in cal.method
    sheet = predict_from_table(H20_CSV, gather_model=GatherModelSpec(prior="datasheet"))
    assert sheet.break_even_tokens == pytest.approx(2050.0, abs=0.1) and sheet.recommended_threshold_tokens == 4096


def test_cli_predict_gather_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--gather", "h20-calibrated"]) == EXIT_OK
    out = capsys.readouterr().out
    m = re.search(r"break-even: ≈ ([\d,]+) tokens", out)
    assert m and float(m.group(1).replace(",", "")) == pytest.approx(1642, abs=1)  # linear, the CLI's default
    assert "h20-calibrated prior" in out
