"""``gemmBackend: vllm`` against the real vLLM 0.33.0 on CPU: the layer built by vLLM's classes, V4.1's
MXFP8 weights loaded through its loaders, the classes it chose, the forward and the token split.

What CPU cannot show: the GPU kernel. vLLM 0.33 has no MXFP8 linear kernel for its CPU platform, so
the backend registers vLLM's own ``EmulationMxfp8LinearKernel`` there (and says so); on an SM90 GPU
vLLM picks ``HummingMxfp8LinearKernel`` (its candidate order is asserted below).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from blockweights import BlockWeight, random_block_weight
from v41spec import v41_spec

from spx.api.spec import ExperimentSpec
from spx.bench import vllm_backend

HERE = Path(__file__).resolve().parent
N, K = 1792, 5120


@pytest.fixture(scope="module")
def weight() -> BlockWeight:
    return random_block_weight(N, K, 32, seed=3)


def test_v41_config_is_deepseek_v4_fp8_with_32x32_e8m0_blocks(vllm: ModuleType) -> None:
    from vllm.models.deepseek_v41.quant_config import DeepseekV4FP8Config

    config = vllm_backend.vllm_quant_config(32)
    assert type(config) is DeepseekV4FP8Config
    assert config.get_name() == "deepseek_v4_fp8"
    assert config.weight_block_size == [32, 32]
    assert config.is_checkpoint_fp8_serialized


def test_cpu_platform_has_no_mxfp8_kernel_of_its_own(vllm: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the backend registers vLLM's emulation kernel on CPU: vLLM's own selection finds none."""
    from vllm.model_executor.kernels import linear as kernels
    from vllm.platforms import PlatformEnum

    monkeypatch.setattr(kernels, "_POSSIBLE_MXFP8_KERNELS", {
        p: ks for p, ks in kernels._POSSIBLE_MXFP8_KERNELS.items() if p is not PlatformEnum.CPU
    })
    with pytest.raises(ValueError, match="Failed to find a kernel that can implement the MXFP8 linear layer"):
        kernels.init_mxfp8_linear_kernel(weight_shape=(N, K))


def test_weights_load_through_vllms_loaders_in_the_checkpoint_layout(vllm: ModuleType, weight: BlockWeight) -> None:
    layer, info = vllm_backend.build_vllm_layer(v41_spec(), "cpu", weight)
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear
    from vllm.model_executor.layers.quantization.modelopt import ModelOptLinearMethod

    assert type(layer) is MergedColumnParallelLinear
    assert type(layer.quant_method) is ModelOptLinearMethod
    assert layer.output_sizes == [1280, 512]
    params = dict(layer.named_parameters())
    assert sorted(params) == ["weight", "weight_scale"]
    w, s = params["weight"], params["weight_scale"]
    assert (tuple(w.shape), w.dtype) == ((N, K), torch.float8_e4m3fn)
    assert torch.equal(w.data.view(torch.uint8), weight.weight.view(torch.uint8))  # every byte, both shards
    # vLLM's MXFP8 loader expanded the checkpoint's [n/32, K/32] e8m0 block scales to one byte per row
    assert (tuple(s.shape), s.dtype) == ((N, K // 32), torch.uint8)
    assert torch.equal(s.data, weight.row_scales_e8m0())
    assert info.to_dict() == {
        "layer": "MergedColumnParallelLinear",
        "quantConfig": "DeepseekV4FP8Config",
        "quantMethod": "ModelOptLinearMethod",
        "linearKernel": "EmulationMxfp8LinearKernel",
        "linearBackend": "auto",
        "platform": "cpu",
        "kernelNote": info.kernel_note,
        "kernelCandidatesSm90": ",".join(vllm_backend.mxfp8_kernel_candidates(90)),
    }
    assert info.kernel_note is not None and "no MXFP8 linear kernel for its CPU platform" in info.kernel_note


def test_checkpoint_scales_are_e8m0_blocks_per_shard(vllm: ModuleType, weight: BlockWeight) -> None:
    shards = vllm_backend.checkpoint_tensors(weight, 32, [1280, 512])
    assert [(i, tuple(w.shape), tuple(s.shape), s.dtype) for i, w, s in shards] == [
        (0, (1280, K), (40, 160), torch.float8_e8m0fnu),
        (1, (512, K), (16, 160), torch.float8_e8m0fnu),
    ]
    restored = torch.cat([s.view(torch.uint8) for _, _, s in shards]).int() - 127
    assert torch.equal(torch.exp2(restored.float()), weight.scale)


def test_forward_matches_the_dequantised_weight(vllm: ModuleType, weight: BlockWeight) -> None:
    proj = vllm_backend.build_vllm_projection(v41_spec(), "cpu", weight)
    x = torch.randn(33, K, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    y = proj(x)
    assert (tuple(y.shape), y.dtype) == ((33, N), torch.bfloat16)
    w = weight.dequantize()
    reference = x.float() @ w.t()
    bound = (x.float().abs() @ w.abs().t()) * 2**-7  # bf16 output rounding + fp32 accumulation
    assert bool(((y.float() - reference).abs() <= bound).all())
    assert torch.equal(proj.split(x), y)  # one rank: sp_shard/sp_all_gather are the identity


def test_linear_backend_is_vllms_kernel_config(vllm: ModuleType, weight: BlockWeight) -> None:
    """``--linear-backend``: passed to vLLM's ``KernelConfig``; an unknown one is refused with vLLM's list."""
    _, info = vllm_backend.build_vllm_layer(v41_spec(), "cpu", weight, linear_backend="emulation")
    assert (info.linear_backend, info.linear_kernel) == ("emulation", "EmulationMxfp8LinearKernel")
    with pytest.raises(ValueError, match="linear backend 'nope': Input should be 'auto', .*'marlin', 'humming'"):
        vllm_backend.build_vllm_layer(v41_spec(), "cpu", weight, linear_backend="nope")


def test_sm90_ranks_humming_ahead_of_marlin(vllm: ModuleType) -> None:
    sm90 = vllm_backend.mxfp8_kernel_candidates(90)
    assert sm90.index("HummingMxfp8LinearKernel") == sm90.index("MarlinMxfp8LinearKernel") - 1
    # the kernels ahead of Humming need SM100 (FlashInfer), so on SM90 with humming installed it runs
    assert sm90[: sm90.index("HummingMxfp8LinearKernel")] == [
        "FlashInferCutedslMxfp8LinearKernel", "FlashInferCutlassMxfp8LinearKernel",
    ]
    sm100 = vllm_backend.mxfp8_kernel_candidates(100)
    assert sm100.index("MarlinMxfp8LinearKernel") < sm100.index("HummingMxfp8LinearKernel")


def _has_amx_fp8() -> bool:
    """vLLM 0.33's CPU FP8 block kernel (``CPUFp8W8A8BlockScaledMMKernel``) needs native AMX-FP8; AMX tiles
    alone (``amx_tile``, Sapphire Rapids) are not enough, and the W8A16 fallback's ``fp8_scaled_mm_cpu`` op exists
    only in vLLM's CPU build, not in the wheel these tests install."""
    try:
        return "amx_fp8" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def test_block128_weights_take_fp8_linear_method(vllm: ModuleType) -> None:
    """DeepSeek-V3-style 128×128 blocks: ``Fp8Config`` → ``Fp8LinearMethod``; vLLM's CPU FP8 block
    kernels need AMX-FP8, so without it the error says so."""
    w = random_block_weight(N, K, 128, seed=4)
    v3 = ExperimentSpec.model_validate({"projection": {"weightFormat": "fp8-block128-ue8m0"}})
    if not _has_amx_fp8():
        with pytest.raises(RuntimeError, match="(?s)could not build fused_wqa_wkv on cpu.*requires (native )?AMX"):
            vllm_backend.build_vllm_layer(v3, "cpu", w)
        return
    layer, info = vllm_backend.build_vllm_layer(v3, "cpu", w)
    assert info.quant_method == "Fp8LinearMethod"
    assert torch.equal(layer.weight_scale_inv.data, w.scale)


def test_bad_inputs_are_named(vllm: ModuleType, weight: BlockWeight) -> None:
    bf16 = ExperimentSpec.model_validate({"projection": {"weightFormat": "bf16"}})
    with pytest.raises(ValueError, match="weightFormat bf16 is not one"):
        vllm_backend.build_vllm_layer(bf16, "cpu", weight)
    v3 = ExperimentSpec.model_validate({"projection": {"weightFormat": "fp8-block128-ue8m0"}})
    with pytest.raises(ValueError, match="has 128×128 blocks, the weight has 32×32"):
        vllm_backend.build_vllm_layer(v3, "cpu", weight)
    small = random_block_weight(1280, K, 32)
    with pytest.raises(ValueError, match=r"weight is \(1280, 5120\), the projection needs \(1792, 5120\)"):
        vllm_backend.build_vllm_layer(v41_spec(), "cpu", small)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="device cuda, but torch sees no CUDA GPU here"):
            vllm_backend.build_vllm_layer(v41_spec(), "cuda", weight)
    not_pow2 = BlockWeight(weight.weight, weight.scale * 1.5, 32)
    with pytest.raises(ValueError, match="powers of two"):
        vllm_backend.checkpoint_tensors(not_pow2, 32, [1280, 512])


def test_two_ranks_split_equals_replicated(vllm: ModuleType, tmp_path: Path) -> None:
    """Two processes, vLLM's TP group over gloo: ``sp_all_gather(layer(sp_shard(x)))[:M]`` equals the
    replicated ``layer(x)`` at token counts that need padding (1, 7, 129) and not (64)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "VLLM_TARGET_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen([sys.executable, str(HERE / "tp_worker.py"), str(tmp_path)],
                         env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for r in range(2)
    ]
    logs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for r, report in enumerate(reports):
        assert (report["tpRank"], report["tpWorldSize"]) == (r, 2)
        assert report["info"]["quantMethod"] == "ModelOptLinearMethod"
        for point in report["points"]:
            assert point["shape"] == [point["tokens"], N]
            assert point["maxAbsDiff"] <= 2**-7 * point["maxAbs"], point
        assert report["gather"] == {"shape": [8, N], "rows": [1.0] * 4 + [2.0] * 4, "path": "unknown"}
