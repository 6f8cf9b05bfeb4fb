"""Correctness before timing: split against replicated, replicated against an fp32 reference.

Outputs are poisoned with NaN before the correctness run (graph mode, :mod:`spx.bench.timing`), so an
output not fully written shows. The split output is compared with the replicated one (max abs
difference); the replicated output with ``x.float() @ W_deq.float().T`` (relative Frobenius error,
``referenceRelError``); above :func:`spx.bench.gemm.reference_tolerance` the run fails before that
point is timed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spx.bench.candidates import Candidates, PointPlan
from spx.bench.context import BenchContext, all_reduce_max
from spx.bench.gemm import reference_tolerance

if TYPE_CHECKING:
    import torch


def check_correctness(ctx: BenchContext, replicated_out: torch.Tensor, split_out: torch.Tensor, plan: PointPlan) -> tuple[float, float]:
    """Max |split − replicated| (max over ranks) and max |replicated|.

    With a modelled gather the rank's own shard is compared with the matching replicated rows.

    Raises:
        RuntimeError: an output still holds NaN after the poisoned run (not fully written).
    """
    import torch

    if ctx.gather_source == "modelled" and ctx.tp > 1:
        lo = ctx.rank * plan.rows_per_rank
        hi = min(lo + plan.rows_per_rank, plan.tokens)
        ref = replicated_out[lo:hi].float()
        got = split_out[: max(0, hi - lo)].float()
    else:
        ref, got = replicated_out.float(), split_out.float()
    for name, t in (("replicated", ref), ("split", got)):
        if not torch.isfinite(t).all():
            raise RuntimeError(
                f"{name} output at {plan.tokens} tokens holds NaN/inf after the run: not every element was written"
            )
    err = (got - ref).abs().max() if got.numel() else torch.zeros((), device=ref.device)
    ref_max = ref.abs().max() if ref.numel() else torch.zeros((), device=ref.device)
    both = torch.stack([err, ref_max]).to(torch.float64 if ctx.device.type == "cpu" else torch.float32)
    all_reduce_max(ctx, both)
    return float(both[0]), float(both[1])


def reference_error(ctx: BenchContext, x: torch.Tensor, replicated_out: torch.Tensor) -> float:
    """Relative Frobenius error ‖y − y_ref‖ / ‖y_ref‖ of the replicated output (max over ranks).

    ``y_ref = x.float() @ W_deq.float().T`` in float32 (no TF32), ``W_deq`` the dequantised checkpoint
    weight; ``x`` ``[M, K]`` the activations, ``replicated_out`` ``[M, N]``.
    """
    import torch

    assert ctx.reference_weight is not None
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = x.float() @ ctx.reference_weight.t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    rel = torch.linalg.vector_norm(replicated_out.float() - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30)
    t = rel.reshape(1).to(torch.float64 if ctx.device.type == "cpu" else torch.float32)
    all_reduce_max(ctx, t)
    return float(t[0])


def check_reference(ctx: BenchContext, cands: Candidates, replicated_out: torch.Tensor) -> float:
    """:func:`reference_error` of this point; raises before any timing when it exceeds the tolerance.

    Raises:
        RuntimeError: relative error above :func:`spx.bench.gemm.reference_tolerance` (every rank sees
            the same value, so every rank raises).
    """
    rel = reference_error(ctx, cands.x, replicated_out)
    tol = reference_tolerance(ctx.gemm_backend, ctx.spec.projection.weight_format)
    if not rel <= tol:  # also catches NaN
        raise RuntimeError(
            f"gemm {ctx.gemm_backend} at {cands.plan.tokens} tokens: replicated output differs from the fp32 "
            f"dequantized reference by {rel:.3g} (relative Frobenius) > tolerance {tol:.3g}; the kernel or its "
            "weight conversion is wrong, so its timings would mean nothing"
        )
    return rel


def check_pad_free(ctx: BenchContext, cands: Candidates, pad_free_out: torch.Tensor, split_out: torch.Tensor) -> float:
    """Max |pad-free − sp_shard path| over ranks: the gathered, trimmed outputs ``[M, N]`` with a real
    gather; with a modelled one, the pad-free rank's shard output ``[M_pad/TP, N]`` against the GEMM of
    ``sp_shard``'s rows of that rank (:func:`spx.bench.sequence_parallel.sp_shard`, computed here once).

    The two see the same rows in the same shape, so the difference is 0 wherever the GEMM is
    deterministic (reported as ``padFreeMaxAbsDiff``; the tests require 0 on CPU).

    Raises:
        RuntimeError: the pad-free output holds NaN/inf after the poisoned run, or its shape differs.
    """
    import torch

    from spx.bench.sequence_parallel import sp_shard

    if cands.gathered or ctx.tp == 1:
        ref = split_out.float()
    else:
        ref = ctx.projection(sp_shard(cands.x, ctx.tp, cands.pad_free_rank)).float()
    got = pad_free_out.float()
    if not torch.isfinite(got).all():
        raise RuntimeError(f"pad-free output at {cands.plan.tokens} tokens holds NaN/inf after the run: "
                           "not every element was written")
    if got.shape != ref.shape:
        raise RuntimeError(f"pad-free output at {cands.plan.tokens} tokens has shape {tuple(got.shape)}, "
                           f"the sp_shard path {tuple(ref.shape)}")
    err = (got - ref).abs().max() if got.numel() else torch.zeros((), device=ref.device)
    t = err.reshape(1).to(torch.float64 if ctx.device.type == "cpu" else torch.float32)
    all_reduce_max(ctx, t)
    return float(t[0])
