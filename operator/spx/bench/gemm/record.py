"""One GEMM backend of the kernel microbenchmark, as a record: what it runs, where it can run, how it is built.

Each backend's module (:mod:`~spx.bench.gemm.humming`, :mod:`~spx.bench.gemm.marlin`,
:mod:`~spx.bench.gemm.ceilings`, :mod:`~spx.bench.gemm.vllm_linear`) declares its :class:`GemmKernel`;
:mod:`spx.bench.gemm.registry` lists them, and :mod:`spx.bench.gemm.choose` walks them. This module imports no
backend, so a backend imports it without a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from spx.api.spec import ExperimentSpec
from spx.vocabulary import ResolvedGemmBackend, WeightFormat

if TYPE_CHECKING:
    import torch

    from spx.bench.gemm.projection import Projection
    from spx.bench.weights import BlockFp8Weight

#: What a reference ceiling's reason says of it.
CEILING = "a cuBLAS reference ceiling, not vLLM's kernel"


class Availability(NamedTuple):
    """Whether a backend's kernels can run on this machine (``ok``), and its version/source or why not."""

    ok: bool
    why: str


#: ``x[M, K] -> y[M, N]`` builder of a backend: ``(weight, spec, device) -> Projection``.
Build = Callable[["BlockFp8Weight", ExperimentSpec, "torch.device"], "Projection"]


@dataclass(frozen=True)
class GemmKernel:
    """One GEMM backend (``spec.kernel.gemmBackend`` other than ``auto``).

    - ``name``: its value in :data:`spx.vocabulary.ResolvedGemmBackend`.
    - ``runs``: what it runs, for the recorded ``gemmBackendReason`` (e.g. ``vLLM 0.33
      HummingMxfp8LinearKernel, W8A16``).
    - ``formats``: the weight formats (:data:`spx.vocabulary.WEIGHT_FORMATS`) it takes; ``format_note`` says
      why in the refusal of another (e.g. ``vLLM's MXFP8 path: 32×32 blocks, e8m0 scales``).
    - ``cuda``: a CUDA kernel only (refused on CPU; :data:`spx.vocabulary.CUDA_GEMM_BACKENDS` says the same to
      the spec check, ``tests/unit/test_gemm_registry.py`` holds them equal).
    - ``min_capability``: the least compute capability it runs on, as vLLM writes it (90 = SM90); ``None``: any.
    - ``w8a8_formats``: the weight formats on which it also quantises the activations to FP8 (W8A8; else W8A16);
      its reference tolerance follows (:func:`spx.bench.gemm.build.reference_tolerance`).
    - ``ceiling``: a cuBLAS reference ceiling rather than a kernel vLLM runs.
    - ``vllm_kernel``: the vLLM 0.33 MXFP8 linear-kernel class it is (its place in ``auto``'s order,
      :data:`spx.bench.gemm.registry.VLLM_MXFP8_CUDA_ORDER`); ``None`` for others.
    - ``install``: how to get its kernels where ``available`` says no.
    - ``available``: ``() -> (ok, why)``, never raises (``None``: nothing to check before the build).
    - ``build``: the projection builder; raises ``RuntimeError`` (kernels missing) or ``ValueError`` (a
      weight block or activation dtype it cannot take).
    """

    name: ResolvedGemmBackend
    runs: str
    formats: frozenset[WeightFormat]
    format_note: str
    cuda: bool
    min_capability: int | None
    w8a8_formats: frozenset[WeightFormat]
    ceiling: bool
    build: Build
    vllm_kernel: str | None = None
    install: str = ""
    available: Callable[[], tuple[bool, str]] | None = None

    @property
    def title(self) -> str:
        """Its name as vLLM's kernel class has it (``Humming``), else its spx name."""
        return self.vllm_kernel.removesuffix("Mxfp8LinearKernel") if self.vllm_kernel else self.name
