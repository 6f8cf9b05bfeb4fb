"""The kernel bench on CPU, one rank: the modelled-gather path, correctness, the result document."""

import pytest

torch = pytest.importorskip("torch")

from spx.api import ExperimentSpec, KernelResult  # noqa: E402
from spx.bench.kernel import PointPlan, run_kernel_bench  # noqa: E402


def small_spec(**kernel):
    return ExperimentSpec.model_validate(
        {
            "projection": {"hiddenSize": 256, "outputSizes": [128, 128]},
            "parallelism": {"tensorParallelSize": 4},
            "sweep": {"tokens": [3, 8, 37]},
            "kernel": {"device": "cpu", "samples": 5, "warmup": 1, **kernel},
        }
    )


@pytest.mark.parametrize(
    ("tokens", "tp", "padded", "rows"),
    [(6, 8, 8, 1), (8, 8, 8, 1), (2048, 8, 2048, 256), (37, 4, 40, 10), (1, 1, 1, 1)],
)
def test_point_plan_pads_to_a_multiple_of_tp(tokens, tp, padded, rows):
    plan = PointPlan.of(tokens, tp)
    assert (plan.padded_tokens, plan.rows_per_rank) == (padded, rows)


def test_single_rank_cpu_run_models_the_gather_and_checks_correctness():
    spec = small_spec()
    result = run_kernel_bench(spec)
    assert isinstance(result, KernelResult)
    KernelResult.model_validate_json(result.model_dump_json(by_alias=True))  # round-trips
    assert result.device == "cpu" and result.timer == "host" and result.gather_source == "modelled"
    assert any("CPU smoke run" in w for w in result.warnings)
    assert [p.tokens for p in result.points] == [3, 8, 37]
    model = spec.kernel.gather_model
    for p in result.points:
        assert len(p.replicated.samples_us) == 5 and len(p.split.samples_us) == 5
        assert p.replicated.q1_us <= p.replicated.median_us <= p.replicated.q3_us
        expected = model.gather_us(p.padded_tokens, 256, 2, 4)  # bf16, N = 256
        assert p.gather_us == pytest.approx(expected)
        assert p.split.median_us >= expected  # split = measured shard GEMM + modelled gather
        # same GEMM on the same rows: the rank's shard equals the replicated rows (bf16 CPU BLAS)
        assert p.max_abs_error <= 0.05 * max(1.0, p.max_abs_reference or 1.0)


def test_gather_model_formula():
    m = small_spec(gatherModel={"prior": "datasheet"}).kernel.gather_model
    # 10 µs + 7/8 x 2048 x 1792 x 2 B / 360 GB/s = 10 + 17.84 µs
    assert m.gather_us(2048, 1792, 2, 8) == pytest.approx(10 + 7 / 8 * 2048 * 1792 * 2 / 360e9 * 1e6)
    assert m.gather_us(2048, 1792, 2, 1) == 0.0


def test_fault_injection_names_the_rank(monkeypatch):
    monkeypatch.setenv("SPX_FAULT_INJECT_RANK", "0")
    with pytest.raises(RuntimeError, match="injected fault on rank 0"):
        run_kernel_bench(small_spec())


def test_gpu_only_settings_fail_clearly_on_cpu():
    # device: cpu with them is refused at validation (spx.api.combinations); the bench still refuses them
    # on a device that resolved to the CPU at run time (device: auto here)
    with pytest.raises(ValueError, match="spec.kernel.timer: cupti and cuda-events time CUDA kernels"):
        small_spec(timer="cupti")
    with pytest.raises(ValueError, match="spec.kernel.timer: cupti needs a CUDA GPU"):
        run_kernel_bench(small_spec(device="auto", timer="cupti"))
    fp8 = small_spec(device="auto").model_copy(deep=True)
    fp8.projection.weight_format = "fp8-block128-ue8m0"
    fp8.kernel.gemm_backend = "torch-fp8"
    with pytest.raises(ValueError, match="gemmBackend: torch-fp8 needs"):
        run_kernel_bench(ExperimentSpec.model_validate(fp8.model_dump()))


def test_fault_injection_at_a_token_count(monkeypatch):
    monkeypatch.setenv("SPX_FAULT_INJECT_RANK", "0")
    monkeypatch.setenv("SPX_FAULT_INJECT_TOKENS", "37")
    seen = []
    with pytest.raises(RuntimeError, match="injected fault on rank 0 at 37 tokens"):
        run_kernel_bench(small_spec(), on_point=lambda p: seen.append(p.tokens))
    assert seen == [3, 8]  # the points before the fault were delivered


def test_cpu_points_record_their_mode_at_the_capture_limit_and_both_bounds():
    """On CPU every point runs eagerly (a smoke run) and says what vLLM would do at the 512/513 edge."""
    from spx.analysis.judge import judge

    spec = small_spec(maxCudagraphCaptureSize=8).model_copy(
        update={"sweep": small_spec().sweep.model_copy(update={"tokens": [8, 9]})})
    result = run_kernel_bench(spec)
    assert result is not None and result.max_cudagraph_capture_size == 8
    (p8, p9) = result.points
    assert (p8.execution, p9.execution) == ("eager", "eager")
    assert "8 <= max_cudagraph_capture_size 8: vLLM replays a CUDA graph" in p8.execution_reason
    assert "9 > max_cudagraph_capture_size 8: vLLM runs this batch eagerly" in p9.execution_reason
    for p in result.points:
        assert len(p.replicated.host_samples_us) == 5 and len(p.split.host_samples_us) == 5
        # the gather's GPU time is modelled; its launch is issued for real (a 1-rank gloo group here)
        # inside the split's host samples and labelled measured (tests/unit/test_bench_gather_launch.py)
        assert p.gather_source == "modelled" and p.gather_host_source == "measured"
        assert p.gather_host_us is not None and 0 < p.gather_host_us <= p.split.host_median_us
    status = judge(result, spec).kernel
    assert status is not None and [r.regime for r in status.regimes] == ["gpu-bound", "host-bound"]
    assert all(p.host_delta_us is not None and p.host_delta_low_us is not None for p in status.points)


def test_the_default_capture_limit_is_vllms_512_on_cpu_and_hopper():
    spec = small_spec().model_copy(update={"sweep": small_spec().sweep.model_copy(update={"tokens": [512, 513]})})
    result = run_kernel_bench(spec)
    assert result is not None and result.max_cudagraph_capture_size == 512
    assert "512 <= max_cudagraph_capture_size 512" in result.points[0].execution_reason
    assert "513 > max_cudagraph_capture_size 512" in result.points[1].execution_reason
