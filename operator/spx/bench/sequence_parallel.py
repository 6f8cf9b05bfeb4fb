"""The token split as vLLM issues it: ``sp_shard`` (pad M to a multiple of TP, keep this rank's rows),
the GEMM, ``sp_all_gather``, and the trim back to M; and :func:`pad_free_shard`, the split vLLM could have.

vLLM 0.33's split path of ``fused_wqa_wkv`` (``_fused_wqa_wkv_gemm`` in
``vllm/models/deepseek_v41/attention.py``, when ``num_tokens >= _SHARD_FUSED_WQA_WKV_MIN_TOKENS``) calls
``sp_shard`` and ``sp_all_gather`` from ``vllm/models/common/ops/sequence_parallel.py`` and slices the
gathered ``[M_pad, N]`` back to ``[:num_tokens]``. :func:`resolve_sp_shard` returns vLLM's own
``sp_shard`` where vLLM is importable and its TP group is this run's (``gather: vllm``), else
:func:`sp_shard`, a port of it with TP size and rank passed in (checked equal to vLLM's in the vllm
test stage: ``tests/real_vllm/test_sequence_parallel.py``).

:func:`pad_free_shard` is spx's proposal for vLLM, measured as the ``pad-free`` candidate: each rank takes
its rows of ``x`` as a view and only a rank whose rows run past M (the last one, for M ≥ TP·(TP − 1))
pads its own short shard (≤ M_pad/TP rows) before the all-gather, instead of every rank copying the
whole ``[M, K]`` hidden state into ``[M_pad, K]`` whenever M % TP ≠ 0. Every rank's shard holds exactly
the rows ``sp_shard`` gives it, so the gathered, trimmed output is the same (checked on 2 gloo ranks by
``tests/unit/test_pad_free_shard.py`` against the port and, in the vllm test stage, against vLLM's own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Where vLLM 0.33 defines the functions ported here.
VLLM_MODULE = "vllm.models.common.ops.sequence_parallel"


def sp_pad(tokens: int, tp: int) -> int:
    """Rows ``sp_shard`` appends so that M is a multiple of TP: ``(-tokens) % tp`` (vLLM's ``sp_pad``).

    Raises:
        ValueError: ``tokens < 0`` or ``tp < 1``.
    """
    if tokens < 0 or tp < 1:
        raise ValueError(f"need tokens >= 0 and tp >= 1, got tokens={tokens}, tp={tp}")
    return (-tokens) % tp


def sp_shard(x: torch.Tensor, tp: int, rank: int) -> torch.Tensor:
    """This rank's rows of ``x[M, ...]`` padded with zeros to ``M_pad`` (a multiple of ``tp``).

    Port of vLLM 0.33's ``sp_shard`` (``vllm/models/common/ops/sequence_parallel.py``): pad the first
    dimension by ``(-M) % tp`` rows (``torch.nn.functional.pad`` with ``(0, 0) * (ndim - 1) + (0, pad)``),
    then ``chunk = M_pad // tp`` rows from ``rank * chunk``. Returns a view ``[M_pad / tp, ...]``.

    Raises:
        ValueError: ``rank`` outside ``[0, tp)``.
    """
    import torch

    if not 0 <= rank < tp:
        raise ValueError(f"rank {rank} is outside [0, {tp})")
    pad = sp_pad(x.shape[0], tp)
    if pad > 0:
        x = torch.nn.functional.pad(x, (0, 0) * (x.ndim - 1) + (0, pad))
    chunk = x.shape[0] // tp
    return x[rank * chunk : (rank + 1) * chunk]


def shard_rows(tokens: int, tp: int, rank: int) -> tuple[int, int, int]:
    """``(start, stop, short)``: rank ``rank``'s real rows ``x[start:stop]`` of ``tokens`` and how many zero
    rows it appends to reach ``M_pad / tp`` (``sp_shard``'s chunk; ``short`` > 0 only for a trailing rank).

    Raises:
        ValueError: ``tokens < 0``, ``tp < 1`` or ``rank`` outside ``[0, tp)``.
    """
    if not 0 <= rank < tp:
        raise ValueError(f"rank {rank} is outside [0, {tp})")
    chunk = (tokens + sp_pad(tokens, tp)) // tp
    start, stop = min(rank * chunk, tokens), min((rank + 1) * chunk, tokens)
    return start, stop, chunk - (stop - start)


def pad_free_shard(x: torch.Tensor, tp: int, rank: int) -> torch.Tensor:
    """This rank's ``[M_pad / tp, ...]`` rows of ``x[M, ...]``, equal to :func:`sp_shard`'s, without padding ``x``.

    A view of ``x`` when the rank's rows are all real (every rank when ``M % tp == 0``); else only this
    rank's own rows are copied and padded with zeros (``torch.nn.functional.pad``, at most ``M_pad / tp``
    rows; :func:`shard_rows`). spx's proposal for vLLM 0.33's ``sp_shard``
    (``vllm/models/common/ops/sequence_parallel.py``), which pads the whole ``x`` on every rank.

    Raises:
        ValueError: ``rank`` outside ``[0, tp)``.
    """
    import torch

    start, stop, short = shard_rows(x.shape[0], tp, rank)
    shard = x[start:stop]
    if short > 0:
        shard = torch.nn.functional.pad(shard, (0, 0) * (x.ndim - 1) + (0, short))
    return shard


def sp_trim(gathered: torch.Tensor, tokens: int) -> torch.Tensor:
    """The gathered ``[M_pad, N]`` trimmed to the ``tokens`` real rows (a view), as vLLM's split path does."""
    return gathered[:tokens]


def resolve_sp_shard(tp: int, rank: int, use_vllm: bool) -> tuple[Callable[[torch.Tensor], torch.Tensor], str]:
    """The ``sp_shard`` the split candidate calls, and where it comes from (``vllm`` or ``port``).

    ``use_vllm``: vLLM's TP group is initialised for this run (``gather: vllm``), so vLLM's own
    ``sp_shard`` reads this run's TP size and rank; otherwise, or when vLLM is not importable, the port.
    """
    if use_vllm:
        try:
            import importlib

            vllm_sp = importlib.import_module(VLLM_MODULE)
        except Exception:  # any import failure: no usable vLLM here
            pass
        else:
            fn: Callable[[torch.Tensor], torch.Tensor] = vllm_sp.sp_shard
            return fn, "vllm"

    def port(x: torch.Tensor) -> torch.Tensor:
        return sp_shard(x, tp, rank)

    return port, "port"
