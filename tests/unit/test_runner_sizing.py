"""spx.runner.sizing: the memory/time estimate that refuses a run before any rank starts (pure arithmetic)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spx.api import ExperimentSpec
from spx.runner.sizing import (
    GPU_SIZED_FLOPS,
    RANK_BASE_BYTES,
    RunnerError,
    check_fits,
    check_time_limit,
    estimate,
    point_bytes,
    point_flops,
)

GiB = 1 << 30


def spec(tokens: list[int], device: str = "auto", hidden: int = 5120, outputs: list[int] | None = None) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "sweep": {"tokens": tokens}, "kernel": {"device": device},
        "projection": {"hiddenSize": hidden, "outputSizes": outputs or [1280, 512]},
    })


def test_point_bytes_counts_activations_outputs_and_copies() -> None:
    s = spec([1024])
    k, n, m = 5120, 1792, 1024
    expected = m * k * 6 + m * k * 2 + 4 * m * n * 2 + 12 * m * n + n * k * 3
    assert point_bytes(s, 1024) == expected
    assert point_bytes(s, 2048) > 2 * point_bytes(s, 1024) - n * k * 3 - 1  # linear in M, plus the weight


def test_ten_million_tokens_need_hundreds_of_gib() -> None:
    est = estimate(spec([8, 10_000_000]), "cpu", 2)
    assert est.peak_tokens == 10_000_000 and est.total_bytes > 400 * GiB
    assert est.total_bytes == 2 * est.peak_rank_bytes and est.peak_rank_bytes > RANK_BASE_BYTES


def test_refused_with_the_number_when_memory_is_short() -> None:
    with pytest.raises(RunnerError, match=r"GiB .* more than this host can hold \(16.0 GiB available\)"):
        check_fits(spec([8, 10_000_000], "cpu"), "cpu", 2, device_asked=True, cpu_gflops=100.0, available=16 * GiB)


def test_gpu_sized_spec_needs_cpu_to_be_asked_for() -> None:
    s = spec([6, 1024, 4096, 16384])
    slow = 1.0  # GFLOP/s: the estimate is far over the limit
    assert sum(point_flops(s, t, 2) for t in s.sweep.tokens) > GPU_SIZED_FLOPS
    fast = 1e6  # GFLOP/s: the rule is a count of operations, not a time: a fast CPU is refused all the same
    for rate in (slow, fast):
        with pytest.raises(RunnerError, match=r"GPU-sized: its GEMMs add up to .* FLOPs per rank.*over the 1e\+12.*"
                           r"docs/cli.md.*--device cpu") as err:
            check_fits(s, "cpu", 2, device_asked=False, cpu_gflops=rate, available=512 * GiB)
        assert " s of GEMMs" not in str(err.value) and "min of GEMMs" not in str(err.value)
    est = check_fits(s, "cpu", 2, device_asked=True, cpu_gflops=slow, available=512 * GiB)
    assert est.seconds is not None and est.seconds > 3600


def test_small_spec_runs_on_cpu_without_asking() -> None:
    est = check_fits(spec([8, 32], hidden=256, outputs=[128]), "cpu", 2, device_asked=False, cpu_gflops=10.0,
                     available=8 * GiB)
    assert est.seconds is not None and est.seconds < 60


def test_a_sweep_over_its_own_time_limit_is_refused_with_the_estimate_and_the_limit() -> None:
    s = spec([6, 1024, 4096, 16384])
    est = check_fits(s, "cpu", 2, device_asked=True, cpu_gflops=1.0, available=512 * GiB)
    with pytest.raises(RunnerError, match=r"cannot finish within its time limit: it would take ≈ [0-9.]+ h of GEMMs.*"
                       r"spec.timeoutSeconds is 60 s; lower spec.sweep.tokens"):
        check_time_limit(est, 60, "spec.timeoutSeconds", 2)
    check_time_limit(est, est.seconds + 1, "spec.timeoutSeconds", 2)  # within the limit: runs


def test_gpu_memory_check() -> None:
    with pytest.raises(RunnerError, match="GPU memory"):
        check_fits(spec([8, 10_000_000]), "cuda", 8, device_asked=False, available=141 * GiB)
    assert check_fits(spec([8, 16384]), "cuda", 8, device_asked=False, available=141 * GiB).seconds is None



# A projection within the validator's limits but too big for the host: refused before anything is allocated -----

#: examples/quickstart.yaml with hiddenSize 65536 and outputSizes [65536, 65536] in bf16: 16 GiB of bf16 weight,
#: 32 GiB as the fp32 draw the calibration GEMM used to make before the memory check.
HUGE_PROJECTION = {"hiddenSize": 65536, "outputSizes": [65536, 65536], "weightFormat": "bf16",
                   "activationDtype": "bfloat16"}


def _max_rss_of(code: str) -> tuple[int, str, int]:
    """Run ``code`` in a fresh interpreter; its exit code, stdout and peak resident memory (bytes, Linux)."""
    script = code + "\nimport resource, sys\nsys.stderr.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, int(proc.stderr.strip().splitlines()[-1]) * 1024


def test_a_projection_this_host_cannot_hold_is_refused_before_any_allocation() -> None:
    """``check_fits`` used to calibrate the CPU first (a 32 GiB fp32 weight: ``DefaultCPUAllocator`` crash, exit
    1); the memory estimate now refuses it with the number and the fix, and the process never grows."""
    code = f"""
from spx.api import ExperimentSpec
from spx.runner.sizing import RunnerError, check_fits
s = ExperimentSpec.model_validate({{"projection": {HUGE_PROJECTION!r}, "sweep": {{"tokens": [8]}},
                                    "kernel": {{"device": "cpu", "timer": "host", "gather": "gloo"}}}})
try:
    check_fits(s, "cpu", 2, device_asked=True, available=16 << 30)
except RunnerError as err:
    print(err)
"""
    rc, out, rss = _max_rss_of(code)
    assert rc == 0, out
    assert out.startswith("a run this machine cannot hold: the sweep needs ≈ 48.8 GiB (24.4 GiB per rank × 2, at 8 "
                          "tokens) of memory, more than this host can hold (16.0 GiB available): the weights alone "
                          "need 24.0 GiB per rank (hiddenSize 65,536 × outputSizes total 131,072): use a smaller "
                          "spec.projection"), out
    assert rss < 1 * GiB, rss


def test_the_calibration_draws_a_bounded_slice_of_a_huge_projection() -> None:
    """A projection that fits is calibrated on at most ``CALIBRATION_MAX_WEIGHT`` weight elements in its own dtype."""
    pytest.importorskip("torch")
    code = f"""
from spx.api import ExperimentSpec
from spx.runner.sizing import calibrate_cpu_gflops
s = ExperimentSpec.model_validate({{"projection": {HUGE_PROJECTION!r}, "sweep": {{"tokens": [8]}}}})
print(calibrate_cpu_gflops(s, seconds=0.01))
"""
    rc, out, rss = _max_rss_of(code)
    assert rc == 0 and float(out) > 0, out
    assert rss < 2 * GiB, rss  # torch itself, 1 MiB of activations and a 32 MiB slice of the 16 GiB weight

# The gather with fewer ranks than TP: modelled only when asked for (auto, modelled), else refused ------------

REFUSED_GLOO = ("spec.kernel.gather: gloo measures the all-gather between spec.parallelism.tensorParallelSize=2 ranks, "
                "but this run has 1: run 2 ranks (--nproc 2; 2 GPUs on CUDA), or set gather: auto or modelled to "
                "model the gather (spec.kernel.gatherModel)")


@pytest.mark.parametrize(("gather", "ranks", "outcome"), [
    ("gloo", 1, REFUSED_GLOO),
    ("vllm", 1, "spec.kernel.gather: vllm measures the all-gather between spec.parallelism.tensorParallelSize=2 ranks"),
    ("gloo", 2, "gather gloo (measured)"),
    ("auto", 2, "gather gloo (measured)"),
    ("auto", 1, "gather modelled (modelled)"),
    ("modelled", 1, "gather modelled (modelled)"),
    ("modelled", 2, "gather modelled (modelled)"),
])
def test_an_explicit_gather_backend_is_measured_or_refused(gather: str, ranks: int, outcome: str) -> None:
    pytest.importorskip("torch")
    from spx.runner.sizing import preflight

    s = ExperimentSpec.model_validate({"parallelism": {"tensorParallelSize": 2}, "kernel": {
        "device": "cpu", "timer": "host", "gather": gather}})
    if outcome.startswith("spec."):
        with pytest.raises(RunnerError) as err:
            preflight(s, "cpu", ranks)
        assert str(err.value).startswith(outcome)
    else:
        assert outcome in preflight(s, "cpu", ranks)[0]
