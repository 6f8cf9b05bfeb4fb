"""The pad-free sequence-parallel shard: each rank a view of its own rows; only a short shard is padded.

vLLM 0.33's ``sp_shard`` (``vllm/models/common/ops/sequence_parallel.py``) pads the *whole* hidden state
with ``F.pad`` to a multiple of TP whenever ``M % TP != 0`` (a copy of all M rows on every rank), then takes
rank ``r``'s ``chunk = ceil(M / TP)`` rows. The pad-free shard gives every rank the same rows without that
copy: rank ``r`` slices ``[r·chunk, min((r+1)·chunk, M))`` as a view and pads only its own short shard (the
last rank's, ``< chunk`` rows, whenever ``chunk ≥ TP − 1``, i.e. ``M ≥ TP·(TP − 1)``) to ``chunk`` rows. Every
rank's shard has ``chunk`` rows with the same values as vLLM's, so ``sp_all_gather`` followed by the caller's
``[:num_tokens]`` trim gives the same output (tested against ``sp_shard`` in tests/unit/test_vllm_ext_shard.py).

The kernel sweep's ``pad-free`` candidate builds the same shard (:func:`spx.bench.sequence_parallel.pad_free_shard`);
this copy of the index math lives here because the extension runs inside vLLM's processes and may import only the
standard library and spx.vocabulary (pyproject's import contract). tests/unit/test_vllm_ext_shard.py holds both
to the same rows and values.
"""

from __future__ import annotations

from typing import Any


def shard_rows(tokens: int, tp: int, rank: int) -> tuple[int, int, int]:
    """Rank ``rank``'s rows of an ``M = tokens``-row stream split over ``tp`` ranks, as vLLM's sp_shard takes them.

    Returns ``(start, stop, chunk)``: the rank's rows ``[start, stop)`` of the unpadded stream (``stop − start``
    may be < ``chunk``, or 0 for a rank wholly in the padding) and ``chunk = ceil(M / tp)``, the rows each
    rank's shard must have.

    Raises:
        ValueError: ``tokens < 0``, ``tp < 1`` or ``rank`` outside ``[0, tp)``.
    """
    if tokens < 0 or tp < 1 or not 0 <= rank < tp:
        raise ValueError(f"shard_rows(tokens={tokens}, tp={tp}, rank={rank}): need tokens ≥ 0, tp ≥ 1, 0 ≤ rank < tp")
    chunk = -(-tokens // tp)
    start = min(rank * chunk, tokens)
    return start, min(start + chunk, tokens), chunk


def pad_free_shard_of(x: Any, tp: int, rank: int) -> Any:
    """Rank ``rank``'s shard of ``x`` (a torch tensor ``[M, ...]``, any dtype): a view of its rows, padded with
    zeros at the end to ``ceil(M / tp)`` rows only when short. Same values as vLLM's ``sp_shard`` at that rank."""
    import torch.nn.functional as F

    start, stop, chunk = shard_rows(int(x.shape[0]), tp, rank)
    rows = x[start:stop]
    short = chunk - (stop - start)
    if short == 0:
        return rows
    return F.pad(rows, (0, 0) * (x.ndim - 1) + (0, short))


def pad_free_sp_shard(x: Any) -> Any:
    """Drop-in for vLLM's ``sp_shard(x)``: the pad-free shard at this process's TP rank and size
    (``vllm.distributed.get_tensor_model_parallel_rank`` / ``_world_size``)."""
    from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

    return pad_free_shard_of(x, get_tensor_model_parallel_world_size(), get_tensor_model_parallel_rank())
