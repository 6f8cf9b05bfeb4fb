"""The all-gather inside the seed's 8× H20 table, its per-regime fit and residuals (the h20-calibrated prior).

Derivation (:mod:`spx.analysis.gather_prior`): gather(M) = split total(M) − shard GEMM(ceil(M/8) rows),
the shard GEMM interpolated from the table's replicated column (log-log; held at the 6-token time
below 6 rows); regime by the padded shard's bytes (vLLM custom all-gather ≤ 2 MiB, NCCL above); each
regime fitted to ``latency + 7/8 · bytes / busBW`` (:func:`spx.analysis.gather_fit.fit_gather_model`).

    python benchmarks/gather_prior_h20.py                 # the table shipped with spx
    python benchmarks/gather_prior_h20.py path/to/table.csv

Prints the derived gather with the fit, its residuals (µs, % of the gather, % of the split total) and
the datasheet prior per token count; each
regime's parameters with the worst-case effect of the table's 0.1 µs rounding; the alternatives
considered (linear interpolation, relative weights, NCCL with the custom latency); and both priors
at 1024/2048/4096/8192 tokens. Pure arithmetic on published numbers: no GPU, runs anywhere.
"""

from __future__ import annotations

import argparse
import math
from importlib.resources import files
from pathlib import Path

from spx.analysis.gather_fit import fit_gather_bandwidth
from spx.analysis.gather_prior import (
    SEED_DTYPE_BYTES,
    SEED_OUTPUT_SIZE,
    DerivedGather,
    fit_h20_gather_prior,
    rounding_sensitivity,
)
from spx.analysis.reference import parse_kernel_table
from spx.api.gather_model import H20_GATHER_PRIOR, GatherModelSpec

TP = 8


def relative_weighted_fit(ds: list[DerivedGather]) -> tuple[float, float]:
    """Least squares of the relative error (weights 1/t²): (latency µs, busBW GB/s). An alternative only."""
    w = [1 / d.gather_us**2 for d in ds]
    xs = [(TP - 1) / TP * d.total_bytes / 1e3 for d in ds]  # kB: slope µs/kB = 1/(GB/s)
    ys = [d.gather_us for d in ds]
    sw = sum(w)
    mx = sum(wi * x for wi, x in zip(w, xs, strict=True)) / sw
    my = sum(wi * y for wi, y in zip(w, ys, strict=True)) / sw
    slope = sum(wi * (x - mx) * (y - my) for wi, x, y in zip(w, xs, ys, strict=True)) / sum(
        wi * (x - mx) ** 2 for wi, x in zip(w, xs, strict=True)
    )
    return my - slope * mx, 1 / slope


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", type=Path, help="kernel table (default: the seed's H20 table shipped with spx)")
    args = ap.parse_args()
    text = args.csv.read_text() if args.csv else (files("spx") / "data" / "h20_tp8_fused_wqa_wkv.csv").read_text()
    points = parse_kernel_table(text)
    fit = fit_h20_gather_prior(points, TP, "log-log")
    datasheet = GatherModelSpec(prior="datasheet")

    print(f"all-gather derived from the H20 table, TP{TP}, [M_pad, {SEED_OUTPUT_SIZE}] bf16; shard GEMM log-log "
          "interpolated (* = held at the 6-token time)")
    print(f"{'tokens':>6} {'rows':>5} {'shard KiB':>9} {'regime':>6} {'split':>7} {'shard':>8} {'gather':>7} "
          f"{'fit':>7} {'resid µs':>8} {'resid %':>7} {'of split':>8} {'datasheet':>9}")
    for d in fit.derived:
        model = fit.modelled_us(d)
        sheet = datasheet.gather_us(d.padded_tokens, SEED_OUTPUT_SIZE, SEED_DTYPE_BYTES, TP)
        held = "*" if d.shard_gemm_held else " "
        print(f"{d.tokens:6d} {d.shard_rows:5d} {d.shard_bytes / 1024:9.1f} {d.regime:>6} {d.split_us:7.1f} "
              f"{d.shard_gemm_us:7.2f}{held} {d.gather_us:7.2f} {model:7.2f} {d.gather_us - model:+8.2f} "
              f"{(d.gather_us - model) / d.gather_us:+7.1%} {(d.gather_us - model) / d.split_us:+8.1%} {sheet:9.2f}")

    sens = rounding_sensitivity(points, TP, "log-log")
    print("\nper-regime fit (latency + 7/8 x bytes / busBW); ± = worst case of the table's ±0.05 µs rounding")
    for r, rf in fit.regimes.items():
        f = rf.fit
        rms = math.sqrt(sum(e * e for e in f.residuals_us) / len(f.residuals_us))
        print(f"  {r:6}: latency {f.latency_us:6.2f} ± {sens[r][0]:.2f} µs, busBW {f.bus_bandwidth_gbps:6.1f} ± "
              f"{sens[r][1]:.1f} GB/s | {f.points} points ({', '.join(map(str, rf.tokens))}), {rf.method}; "
              f"rms residual {rms:.2f} µs, worst {max(map(abs, f.residuals_us)):.2f} µs ({f.max_rel_residual:.0%})")
        print(f"          spx.api.gather_model.H20_GATHER_PRIOR[{r!r}] = {H20_GATHER_PRIOR[r]}")

    print("\nalternatives considered (not the prior)")
    lin = fit_h20_gather_prior(points, TP, "linear").parameters()
    for r, (lat, bw) in lin.items():
        print(f"  linear shard-GEMM interpolation, {r:6}: {lat:6.2f} µs, {bw:6.1f} GB/s")
    custom = [d for d in fit.derived if d.regime == "custom"]
    lat_w, bw_w = relative_weighted_fit(custom)
    worst_w = max(abs(d.gather_us - (lat_w + (TP - 1) / TP * d.total_bytes / (bw_w * 1e3))) / d.gather_us
                  for d in custom)
    print(f"  custom, relative weights 1/t²: {lat_w:6.2f} µs, {bw_w:6.1f} GB/s (worst residual {worst_w:.0%})")
    nccl = [d for d in fit.derived if d.regime == "nccl"]
    shared = fit_gather_bandwidth([d.total_bytes for d in nccl], [d.gather_us for d in nccl], TP,
                                  fit.regimes["custom"].fit.latency_us)
    print(f"  nccl, latency held at the custom regime's: {shared.latency_us:6.2f} µs, {shared.bus_bandwidth_gbps:6.1f} "
          f"GB/s, residuals {', '.join(f'{e:+.1f} µs' for e in shared.residuals_us)}")
    bw_c = fit.regimes["custom"].fit.bus_bandwidth_gbps
    lat_each = [d.gather_us - (TP - 1) / TP * d.total_bytes / (bw_c * 1e3) for d in nccl]
    print(f"  check: nccl with the custom regime's {bw_c:.1f} GB/s: each point's latency "
          f"{', '.join(f'{v:.2f}' for v in lat_each)} µs (spread {max(lat_each) - min(lat_each):.2f} µs)")

    calibrated = GatherModelSpec()
    print("\nmodelled gather, [M_pad, 1792] bf16 over TP8 (µs)")
    print(f"{'tokens':>6} {'regime':>6} {'h20-calibrated':>14} {'datasheet':>9} {'ratio':>6}")
    for m in (1024, 2048, 4096, 8192):
        c = calibrated.gather_us(m, SEED_OUTPUT_SIZE, SEED_DTYPE_BYTES, TP)
        s = datasheet.gather_us(m, SEED_OUTPUT_SIZE, SEED_DTYPE_BYTES, TP)
        print(f"{m:6d} {calibrated.regime(m, SEED_OUTPUT_SIZE, SEED_DTYPE_BYTES, TP):>6} {c:14.2f} {s:9.2f} {c / s:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
