"""Which GEMM backend runs, and why: ``auto`` = vLLM 0.33's MXFP8 kernel choice; clear errors otherwise.

Pure table tests of :func:`spx.bench.gemm.choose_gemm_backend` (no GPU needed), plus the real
resolution on this CPU machine and the real error paths of the backends whose kernels are absent here.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from spx.api import ExperimentSpec  # noqa: E402
from spx.bench.gemm import (  # noqa: E402
    build_projection,
    choose_gemm_backend,
    reference_tolerance,
    resolve_gemm_backend,
    weight_block_of,
)
from spx.bench.weights import random_block_fp8_weight  # noqa: E402
from spx.vocabulary import CUDA_GEMM_BACKENDS  # noqa: E402

#: How the spec check lists the CUDA-only backends (``spx.api.combinations``).
CUDA_LIST = f"{', '.join(CUDA_GEMM_BACKENDS[:-1])} and {CUDA_GEMM_BACKENDS[-1]}"

MX, V3 = "mxfp8-block32-ue8m0", "fp8-block128-ue8m0"
HUM_OK, HUM_NO = (True, "humming-kernels 0.1.19 importable"), (False, "humming-kernels is not installed")
MAR_OK, MAR_NO = (True, "marlin ops from spx build"), (False, "spx.bench.gemm.marlin: no Marlin ops")
H200, A100, B200 = (9, 0), (8, 0), (10, 0)


def probe(humming, marlin):
    """What ``resolve_gemm_backend`` asks of the registry's kernels, from the table's (available, why) pairs."""
    return {"humming": humming, "marlin": marlin}.__getitem__


@pytest.mark.parametrize(
    ("requested", "fmt", "device", "cap", "humming", "marlin", "backend", "why"),
    [
        # auto on SM90 with MXFP8: vLLM moves Humming ahead of Marlin (_HUMMING_PREFERRED_CAPABILITIES={90})
        ("auto", MX, "cuda", H200, HUM_OK, MAR_OK, "humming", "prefers Humming on SM90"),
        ("auto", MX, "cuda", H200, HUM_OK, MAR_NO, "humming", "_HUMMING_PREFERRED_CAPABILITIES={90}"),
        ("auto", MX, "cuda", H200, HUM_NO, MAR_OK, "marlin", "falls back to Marlin"),
        # below SM90 Marlin comes first in _POSSIBLE_MXFP8_KERNELS
        ("auto", MX, "cuda", A100, HUM_OK, MAR_OK, "marlin", "ranks Marlin first for MXFP8 on SM80"),
        # CPU: a labelled smoke run
        ("auto", MX, "cpu", None, HUM_NO, MAR_NO, "torch-bf16", "CPU smoke run"),
        ("auto", V3, "cpu", None, HUM_NO, MAR_NO, "torch-bf16", "CPU smoke run"),
        # 128×128 blocks: vLLM's W8A8 block GEMM; cuBLASLt's is spx's closest, labelled a ceiling
        ("auto", V3, "cuda", H200, HUM_OK, MAR_OK, "torch-fp8", "ceiling"),
        ("auto", V3, "cuda", A100, HUM_OK, MAR_OK, "torch-bf16", "ceiling"),
        ("auto", "bf16", "cuda", H200, HUM_OK, MAR_OK, "torch-bf16", "unquantized"),
        # explicit choices
        ("humming", MX, "cuda", H200, HUM_OK, MAR_NO, "humming", "HummingMxfp8LinearKernel"),
        ("marlin", MX, "cuda", H200, HUM_OK, MAR_OK, "marlin", "MarlinMxfp8LinearKernel"),
        ("torch-bf16", MX, "cuda", H200, HUM_OK, MAR_OK, "torch-bf16", "not vLLM's kernel"),
        ("torch-bf16", MX, "cpu", None, HUM_NO, MAR_NO, "torch-bf16", "CPU BLAS"),
        ("torch-fp8", V3, "cuda", H200, HUM_OK, MAR_OK, "torch-fp8", "not vLLM's kernel"),
        ("vllm", MX, "cuda", H200, HUM_OK, MAR_OK, "vllm", "vLLM's own linear layer"),
    ],
)
def test_backend_choice_table(requested, fmt, device, cap, humming, marlin, backend, why):
    got, reason = choose_gemm_backend(requested, fmt, device, cap, probe(humming, marlin))
    assert got == backend
    assert why in reason, reason
    assert reason.startswith("auto:" if requested == "auto" else "requested:")


@pytest.mark.parametrize(
    ("requested", "fmt", "device", "cap", "humming", "marlin", "error", "fragments"),
    [
        ("auto", MX, "cuda", H200, HUM_NO, MAR_NO, RuntimeError, ["humming (humming-kernels is not installed", "marlin (", "torch-bf16"]),
        ("auto", MX, "cuda", A100, HUM_OK, MAR_NO, RuntimeError, ["none of vLLM's MXFP8 kernels"]),
        ("auto", MX, "cuda", B200, HUM_OK, MAR_OK, ValueError, ["FlashInfer", "explicitly"]),
        ("humming", MX, "cuda", H200, HUM_NO, MAR_OK, RuntimeError, ["humming: humming-kernels is not installed"]),
        ("marlin", MX, "cuda", H200, HUM_OK, MAR_NO, RuntimeError, ["marlin: spx.bench.gemm.marlin: no Marlin ops"]),
        ("humming", MX, "cpu", None, HUM_OK, MAR_OK, ValueError, ["needs a CUDA GPU", "torch-bf16"]),
        ("humming", V3, "cuda", H200, HUM_OK, MAR_OK, ValueError, ["MXFP8 path", "use weightFormat mxfp8-block32-ue8m0"]),
        ("marlin", "bf16", "cuda", H200, HUM_OK, MAR_OK, ValueError, ["MXFP8 path"]),
        # cuBLASLt blockwise FP8 takes 1×128 / 128×128 blocks only: refused for 32×32 rather than re-blocked
        ("torch-fp8", MX, "cuda", H200, HUM_OK, MAR_OK, ValueError, ["gemmBackend: torch-fp8 needs", "128×128", "humming, marlin"]),
        ("torch-fp8", V3, "cuda", A100, HUM_OK, MAR_OK, ValueError, ["compute capability ≥ 9.0"]),
        ("torch-fp8", V3, "cpu", None, HUM_OK, MAR_OK, ValueError, ["gemmBackend: torch-fp8 needs"]),
        ("cutlass", MX, "cuda", H200, HUM_OK, MAR_OK, ValueError, ["unknown backend 'cutlass'"]),
    ],
)
def test_backend_choice_errors_name_the_fix(requested, fmt, device, cap, humming, marlin, error, fragments):
    with pytest.raises(error) as info:
        choose_gemm_backend(requested, fmt, device, cap, probe(humming, marlin))
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_auto_on_this_cpu_machine_is_a_labelled_smoke_run():
    backend, reason = resolve_gemm_backend(ExperimentSpec(), torch.device("cpu"))
    assert backend == "torch-bf16" and "CPU smoke run" in reason


def _spec(**kernel) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"kernel": {"device": "auto", **kernel}})


@pytest.mark.parametrize("backend", ["humming", "marlin"])
def test_vllms_kernels_refuse_cpu_before_any_rank_starts(backend):
    from spx.bench.kernel import preflight

    with pytest.raises(ValueError, match=f"{CUDA_LIST} are CUDA kernels"):  # device: cpu: validation
        ExperimentSpec.model_validate({"kernel": {"device": "cpu", "gemmBackend": backend}})
    with pytest.raises(ValueError, match=f"{backend} needs a CUDA GPU"):  # device: auto that resolved to the CPU
        preflight(_spec(gemmBackend=backend), "cpu", 1)


def test_humming_build_needs_cuda_with_a_clear_error():
    spec = ExperimentSpec()
    w = random_block_fp8_weight(64, 64, 32, torch.device("cpu"), torch.Generator().manual_seed(0))
    with pytest.raises(RuntimeError, match="humming"):
        build_projection("humming", w, spec, torch.device("cpu"))


def test_humming_refuses_128_blocks():
    spec = ExperimentSpec.model_validate({"projection": {"weightFormat": V3}})
    w = random_block_fp8_weight(128, 128, 128, torch.device("cpu"), torch.Generator().manual_seed(0))
    from spx.bench.gemm.humming import build_humming_projection

    with pytest.raises(ValueError, match="32×32 blocks"):
        build_humming_projection(w, spec, torch.device("cpu"))


def test_torch_fp8_projection_refuses_32_blocks():
    w = random_block_fp8_weight(64, 64, 32, torch.device("cpu"), torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="128×128-block"):
        build_projection("torch-fp8", w, ExperimentSpec(), torch.device("cpu"))


def test_reference_tolerance_by_activation_precision():
    assert reference_tolerance("humming", MX) == reference_tolerance("marlin", MX) == 1e-2
    assert reference_tolerance("torch-bf16", MX) == reference_tolerance("vllm", MX) == 1e-2
    assert reference_tolerance("torch-fp8", V3) == reference_tolerance("vllm", V3) == 5e-2


@pytest.mark.parametrize(
    ("projection", "block"),
    [
        ({}, 32),
        ({"weightFormat": V3}, 128),
        ({"weightFormat": "bf16", "hiddenSize": 256, "outputSizes": [128]}, 128),
        ({"weightFormat": "bf16", "hiddenSize": 96, "outputSizes": [64]}, 32),
    ],
)
def test_bench_weight_block_follows_the_format(projection, block):
    assert weight_block_of(ExperimentSpec.model_validate({"projection": projection})) == block


def test_cpu_run_records_backend_reason_and_reference_error():
    from spx.bench.kernel import run_kernel_bench

    spec = ExperimentSpec.model_validate(
        {
            "projection": {"hiddenSize": 256, "outputSizes": [96, 32]},  # 32-multiples only: MXFP8 blocks
            "parallelism": {"tensorParallelSize": 2},
            "sweep": {"tokens": [5, 64]},
            "kernel": {"device": "cpu", "samples": 5, "warmup": 1},
        }
    )
    result = run_kernel_bench(spec)
    assert result is not None
    assert result.gemm_backend == "torch-bf16" and "CPU smoke run" in (result.gemm_backend_reason or "")
    assert result.reference_tolerance == 1e-2
    for p in result.points:
        # bf16 output rounding only: ~2^-9 relative, far inside 1e-2, and not zero
        assert p.reference_rel_error is not None and 1e-4 < p.reference_rel_error < 5e-3


def test_a_kernel_off_the_reference_fails_the_point_before_timing():
    """A projection whose weights were converted wrongly (here: one block scale doubled) must not be timed."""
    from spx.bench.kernel import measure_point, setup

    spec = ExperimentSpec.model_validate(
        {
            "projection": {"hiddenSize": 128, "outputSizes": [64]},
            "parallelism": {"tensorParallelSize": 1},
            "sweep": {"tokens": [16]},
            "kernel": {"device": "cpu", "samples": 5, "warmup": 0},
        }
    )
    ctx = setup(spec)
    assert measure_point(ctx, 16).reference_rel_error < 1e-2
    bad = ctx.reference_weight.clone()
    bad[:32, :32] *= 2  # what the kernel computes no longer matches the checkpoint's weight
    ctx.reference_weight = bad
    with pytest.raises(RuntimeError, match=r"fp32 dequantized reference by .* > tolerance 0.01"):
        measure_point(ctx, 16)
