"""The ``marlin`` GEMM backend: vLLM 0.33's MXFP8 Marlin W8A16 kernel, as ``--linear-backend marlin`` runs it.

vLLM 0.33.0 path (``MarlinMxfp8LinearKernel``, ``vllm/model_executor/kernels/linear/mxfp8/marlin.py``):

- at load, ``prepare_mxfp8_layer_for_marlin`` (``layers/quantization/utils/marlin_utils_fp8.py``):
  the FP8 weight ``[N, K]`` is packed four bytes to an int32 (``pack_fp8_to_int32``, GPTQ layout
  ``[K/4, N]``), zero-padded to a Marlin tile family (``marlin_padded_nk``: (N%64, K%128) or
  (N%128, K%64)), repacked by ``gptq_marlin_repack(num_bits=8)``; the per-row e8m0 scales
  ``[N, K/32]`` are cast to the default dtype, transposed to ``[K/32, N]``, padded, permuted
  (``marlin_permute_scales``, the 64-entry ``scale_perm``) and reordered for the e8m0 kernel layout
  (``mxfp8_marlin_process_scales``: ``view(-1, 4)[:, [0, 2, 1, 3]]``, back to ``float8_e8m0fnu``);
- per call, ``apply_mxfp8_marlin_linear``: ``marlin_gemm(a=x bf16 [M, K], b_q_type=float8_e4m3fn,
  use_atomic_add=should_use_atomic_add_reduce(...), use_fp32_reduce=True)`` → ``[M, N]`` bf16.

Where vLLM is importable (the bench image) those very functions are called on a small holder
module. Where it is not (a bare GPU box), the ops come from the library
:mod:`spx.bench.gemm.marlin_build` compiles from vLLM 0.33.0's sources (``SPX_MARLIN_LIB`` names it) and
the load-time conversion is this module's line-for-line port of the functions above (a CI test
compares the port with vLLM's own functions on CPU). The workspace (Marlin's locks, ``SMs × 4``
int32, ``MARLIN_MAX_BLOCKS_PER_SM = 4``) is allocated once per layer, as vLLM's persistent workspace
manager does, so no memset is timed.
"""

from __future__ import annotations

import math
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from spx.bench.gemm.record import GemmKernel
from spx.vocabulary import MXFP8

if TYPE_CHECKING:
    import torch

    from spx.api.spec import ExperimentSpec
    from spx.bench.gemm.projection import Projection
    from spx.bench.weights import BlockFp8Weight

MARLIN_LIB_ENV = "SPX_MARLIN_LIB"
#: ``scalar_types.float8_e4m3fn.id`` of vLLM 0.33.0 (``vllm/scalar_type.py``: ScalarType.float_(4, 3,
#: True, NanRepr.EXTD_RANGE_MAX_MIN).id); checked against vLLM in tests/real_vllm.
FLOAT8_E4M3FN_ID = 2814749767172868
GROUP_SIZE = 32  # MX block size (OCP MX spec v1.0)
MAX_BLOCKS_PER_SM = 4  # MARLIN_MAX_BLOCKS_PER_SM, marlin_utils.py
USE_FP32_REDUCE = True  # USE_FP32_REDUCE_DEFAULT, marlin_utils.py
_SCALE_PERM = [i + 8 * j for i in range(8) for j in range(8)]  # get_scale_perms(), marlin_utils.py


def _vllm_importable() -> bool:
    try:
        import vllm._custom_ops  # noqa: F401
    except Exception:  # any import failure means "no usable vLLM here"
        return False
    return True


@cache
def ops_source() -> str:
    """Where ``torch.ops._C.marlin_gemm`` comes from: ``vllm <version>`` or ``spx build <path>``.

    Loads the library on first call.

    Raises:
        RuntimeError: neither vLLM nor ``SPX_MARLIN_LIB`` (a built ``spx_marlin.so``) is available;
            the message says how to build it.
    """
    import torch

    if _vllm_importable():
        import vllm

        return f"vllm {vllm.__version__}"
    lib = os.environ.get(MARLIN_LIB_ENV, "")
    if lib and Path(lib).is_file():
        torch.ops.load_library(lib)
        return f"spx build {lib}"
    raise RuntimeError(
        "gemmBackend marlin: vLLM's Marlin ops are not available. Install vLLM 0.33.0, or build them from its "
        "sdist: `python -m spx.bench.gemm.marlin_build --vllm-src vllm-0.33.0.tar.gz --out build/marlin` and set "
        f"{MARLIN_LIB_ENV}=build/marlin/spx_marlin.so"
        + (f" ({MARLIN_LIB_ENV}={lib[:200]!r} is not a file)" if lib else "")
    )


def marlin_available(device: torch.device | None = None) -> tuple[bool, str]:
    """``(True, source)`` when the Marlin ops can run here, else ``(False, why)``; never raises.

    Needs a CUDA device of compute capability ≥ 8.0 (``is_fp8_marlin_supported``: SM80+).
    """
    import torch

    if device is not None and device.type != "cuda":
        return False, f"Marlin needs a CUDA GPU (device is {device})"
    if not torch.cuda.is_available():
        return False, "Marlin needs a CUDA GPU (none visible)"
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 0):
        return False, f"Marlin FP8 needs compute capability ≥ 8.0, this GPU is {cap[0]}.{cap[1]}"
    try:
        return True, ops_source()
    except (RuntimeError, OSError) as exc:
        return False, str(exc)


def round_up(x: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` ≥ ``x``."""
    return -(-x // multiple) * multiple


def marlin_padded_nk(size_n: int, size_k: int, group_size: int = GROUP_SIZE) -> tuple[int, int]:
    """Port of vLLM's ``marlin_padded_nk``: the cheaper of the (N%64, K%128) and (N%128, K%64) tile families."""
    group = group_size if group_size > 0 else 1
    candidates = (
        (round_up(size_n, 64), round_up(size_k, math.lcm(128, group))),
        (round_up(size_n, 128), round_up(size_k, math.lcm(64, group))),
    )
    return min(candidates, key=lambda nk: (nk[0] * nk[1], nk[0] + nk[1]))


def pack_fp8_to_int32(weight: torch.Tensor) -> torch.Tensor:
    """Port of ``pack_fp8_to_int32(w, size_k_first=False)``: float8 ``[N, K]`` → int32 ``[N, K/4]``."""
    import torch

    if weight.dtype != torch.float8_e4m3fn or weight.ndim != 2:
        raise ValueError(f"expected a 2-D float8_e4m3fn weight, got {weight.dtype} {tuple(weight.shape)}")
    return weight.contiguous().view(torch.int32)


def marlin_scales_mxfp8(
    row_scales_e8m0: torch.Tensor, size_n: int, size_k: int, padded_n: int, padded_k: int, dtype: torch.dtype
) -> torch.Tensor:
    """Port of the scale half of ``prepare_mxfp8_layer_for_marlin``: uint8 ``[N, K/32]`` → e8m0 Marlin layout.

    Steps (vLLM 0.33.0 ``marlin_utils_fp8.py`` / ``marlin_utils.py``): view as ``float8_e8m0fnu``, cast
    to ``dtype`` (vLLM: the default dtype), transpose to ``[K/32, N]``, zero-pad (``marlin_pad_scales``),
    permute (``marlin_permute_scales`` with ``group_size < size_k``: the 64-entry ``scale_perm``), then
    ``mxfp8_marlin_process_scales``. Returns ``float8_e8m0fnu`` ``[padded_k/32, padded_n]``.
    """
    import torch

    scales = row_scales_e8m0[:size_n, : size_k // GROUP_SIZE].contiguous()
    scales = scales.view(torch.float8_e8m0fnu).to(dtype).T.contiguous()
    if (padded_n, padded_k) != (size_n, size_k):
        pad_rows = padded_k // GROUP_SIZE - scales.size(0)
        scales = torch.nn.functional.pad(scales, (0, padded_n - size_n, 0, pad_rows))
    scales = scales.reshape((-1, len(_SCALE_PERM)))[:, _SCALE_PERM].reshape((-1, padded_n)).contiguous()
    scales = scales.view(-1, 4)[:, [0, 2, 1, 3]].view(scales.size(0), -1)
    return scales.to(torch.float8_e8m0fnu)


def should_use_atomic_add_reduce(m: int, n: int, k: int, device: torch.device, dtype: torch.dtype) -> bool:
    """Port of vLLM's ``should_use_atomic_add_reduce``: only when N < 2048, K ≥ 2048 and ``VLLM_MARLIN_USE_ATOMIC_ADD=1``."""
    import torch

    if n >= 2048 or k < 2048 or device.type != "cuda":
        return False
    if os.environ.get("VLLM_MARLIN_USE_ATOMIC_ADD", "0") != "1":
        return False
    return not (torch.cuda.get_device_capability(device)[0] < 9 and dtype == torch.bfloat16)


def make_workspace(device: torch.device) -> torch.Tensor:
    """Marlin's lock workspace: int32 zeros of ``SMs × MAX_BLOCKS_PER_SM`` (``marlin_make_workspace_new``)."""
    import torch

    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return torch.zeros(sms * MAX_BLOCKS_PER_SM, dtype=torch.int32, device=device)


def _spx_port(weight: BlockFp8Weight, device: torch.device, dtype: torch.dtype) -> Projection:
    import torch

    size_n, size_k = weight.weight.shape
    padded_n, padded_k = marlin_padded_nk(size_n, size_k)
    qweight = pack_fp8_to_int32(weight.weight.to(device)).T.contiguous()  # [K/4, N], GPTQ layout
    if (padded_n, padded_k) != (size_n, size_k):
        qweight = torch.nn.functional.pad(qweight, (0, padded_n - size_n, 0, (padded_k - size_k) // 4))
    b_q = torch.ops._C.gptq_marlin_repack(qweight, padded_k, padded_n, 8, False)
    b_s = marlin_scales_mxfp8(weight.row_scales_e8m0().to(device), size_n, size_k, padded_n, padded_k, dtype)
    workspace = make_workspace(device)

    def marlin_linear(x: torch.Tensor) -> torch.Tensor:
        a = x if padded_k == size_k else torch.nn.functional.pad(x, (0, padded_k - size_k))
        m = a.size(0)
        out: torch.Tensor = torch.ops._C.marlin_gemm(
            a, None, b_q, None, b_s, None, None, None, workspace, FLOAT8_E4M3FN_ID, m, padded_n, padded_k,
            should_use_atomic_add_reduce(m, padded_n, padded_k, a.device, a.dtype), USE_FP32_REDUCE, False,
        )
        return out if padded_n == size_n else out[:, :size_n].contiguous()

    return marlin_linear


def _vllm_functions(weight: BlockFp8Weight, device: torch.device) -> Projection:
    import torch
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import (
        apply_mxfp8_marlin_linear,
        prepare_mxfp8_layer_for_marlin,
    )

    size_n, size_k = weight.weight.shape
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight.weight.to(device), requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(weight.row_scales_e8m0().to(device), requires_grad=False)
    layer.output_size_per_partition = size_n
    layer.input_size_per_partition = size_k
    prepare_mxfp8_layer_for_marlin(layer)
    workspace = make_workspace(device)

    def marlin_linear(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = apply_mxfp8_marlin_linear(
            input=x, weight=layer.weight, weight_scale=layer.weight_scale, workspace=workspace,
            size_n=size_n, size_k=size_k,
        )
        return out

    return marlin_linear


def build_marlin_projection(weight: BlockFp8Weight, spec: ExperimentSpec, device: torch.device) -> Projection:
    """``x[M, K] bf16 → y[M, N] bf16`` through vLLM 0.33's MXFP8 Marlin GEMM (W8A16).

    ``weight``: FP8 e4m3 ``[N, K]`` with 32×32 UE8M0 block scales (``weightFormat:
    mxfp8-block32-ue8m0``); its per-row expansion ``[N, K/32]`` is what vLLM's loader hands the kernel.

    Raises:
        ValueError: a weight whose block is not 32 (Marlin MXFP8 is group-32), K not a multiple of 32,
            or activations other than bf16 (vLLM builds MXFP8 Marlin for bf16 only).
        RuntimeError: no CUDA GPU of SM80+, or neither vLLM nor a built ``SPX_MARLIN_LIB`` (see
            :func:`ops_source`).
    """
    import torch

    from spx.bench.gemm.projection import activation_dtype

    if weight.block != GROUP_SIZE:
        raise ValueError(
            f"spec.projection.weightFormat: marlin runs MXFP8 (32-element UE8M0 groups); this weight has "
            f"{weight.block}×{weight.block} blocks — use weightFormat mxfp8-block32-ue8m0 or another gemmBackend"
        )
    dtype = activation_dtype(spec)
    if dtype != torch.bfloat16:
        raise ValueError(
            f"spec.projection.activationDtype: marlin MXFP8 runs bf16 activations (vLLM builds only that), "
            f"got {spec.projection.activation_dtype}; use bfloat16"
        )
    ok, why = marlin_available(device)
    if not ok:
        raise RuntimeError(f"gemmBackend marlin: {why}")
    if why.startswith("vllm"):
        return _vllm_functions(weight, device)
    return _spx_port(weight, device, dtype)



#: The ``marlin`` backend's record (:mod:`spx.bench.gemm.registry`). Minimum capability: what
#: :func:`marlin_available` accepts (8.0).
KERNEL = GemmKernel(
    name="marlin", runs="vLLM 0.33 MarlinMxfp8LinearKernel, W8A16",
    formats=frozenset({MXFP8}), format_note="vLLM's MXFP8 path: 32×32 blocks, e8m0 scales",
    cuda=True, min_capability=80, w8a8_formats=frozenset(), ceiling=False, build=build_marlin_projection,
    vllm_kernel="MarlinMxfp8LinearKernel", install=f"an importable vLLM, or {MARLIN_LIB_ENV} from python -m spx.bench.gemm.marlin_build",
    available=marlin_available,
)
