"""``gemmBackend: vllm``: vLLM's own ``MergedColumnParallelLinear``, built and run by :mod:`spx.bench.vllm_backend`.

vLLM picks its own linear kernel inside (on SM90 with MXFP8 weights ``HummingMxfp8LinearKernel``); with
128×128-block weights it runs ``Fp8LinearMethod``'s W8A8 block GEMM, so those activations are FP8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spx.api.spec import ExperimentSpec
from spx.bench.gemm.record import GemmKernel
from spx.vocabulary import BF16, FP8_BLOCK128, MXFP8

if TYPE_CHECKING:
    import torch

    from spx.bench.gemm.projection import Projection
    from spx.bench.weights import BlockFp8Weight


def build_vllm(weight: BlockFp8Weight, spec: ExperimentSpec, device: torch.device) -> Projection:
    """:func:`spx.bench.vllm_backend.build_vllm_projection` after :func:`~spx.bench.vllm_runtime.ensure_vllm`.

    Raises:
        RuntimeError: no importable vLLM ≥ 0.33 (and see ``build_vllm_layer``).
    """
    from spx.bench import vllm_backend

    vllm_backend.ensure_vllm()
    return vllm_backend.build_vllm_projection(spec, device, weight)


VLLM = GemmKernel(
    name="vllm", runs="vLLM's own linear layer, spx.bench.vllm_backend",
    formats=frozenset({MXFP8, FP8_BLOCK128, BF16}), format_note="", cuda=False, min_capability=None,
    w8a8_formats=frozenset({FP8_BLOCK128}), ceiling=False, build=build_vllm,
)
