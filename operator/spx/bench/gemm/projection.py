"""What every GEMM backend returns, and the activation dtype it runs on.

Its own module so that :mod:`spx.bench.gemm` (which picks and builds a backend) and the backends it
builds (:mod:`spx.bench.gemm.humming`, :mod:`spx.bench.gemm.marlin`) all import it without importing
each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from spx.api.spec import ExperimentSpec

if TYPE_CHECKING:
    import torch

#: ``x[M, K] (activation dtype) -> y[M, N] (activation dtype)``: one backend's projection.
Projection = Callable[["torch.Tensor"], "torch.Tensor"]

#: ``spec.projection.activationDtype`` → the torch dtype's name.
DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


def activation_dtype(spec: ExperimentSpec) -> torch.dtype:
    """The torch dtype of ``spec.projection.activationDtype`` (``torch.bfloat16`` by default)."""
    import torch

    dtype: torch.dtype = getattr(torch, DTYPES[spec.projection.activation_dtype])
    return dtype
