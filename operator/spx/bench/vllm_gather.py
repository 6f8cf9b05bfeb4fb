"""``gather: vllm``: vLLM's sequence-parallel all-gather (``sp_all_gather``) and its ``graph_capture``.

- :func:`build_vllm_gather` returns ``vllm.models.common.ops.sequence_parallel.sp_all_gather`` (the
  custom all-gather below its size limit, NCCL above) after vLLM's distributed init, and records which
  of the two ran per token count (:data:`GATHER_PATHS`).
- :func:`vllm_graph_capture` is vLLM's ``graph_capture`` context for the split candidate's graphs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from spx.api.spec import ExperimentSpec
from spx.bench.vllm_runtime import ensure_vllm, init_vllm_runtime, resolve_device

if TYPE_CHECKING:
    import torch

#: Which gather path ran, per padded token count: ``custom`` (vLLM's custom all-gather), ``nccl``
#: (it declined: over its size limit, or disabled), ``unknown`` (this vLLM does not route through a
#: ``custom_all_gather`` spx can observe; on CPU the TP group's gloo all-gather).
GATHER_PATHS: dict[int, str] = {}

class VllmGather:
    """vLLM's sequence-parallel all-gather of ``[rows, N]`` shards into ``[padded_tokens, N]``."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], padded_tokens: int, n: int, world_size: int) -> None:
        self._fn = fn
        self.padded_tokens = padded_tokens
        self.n = n
        self.world_size = world_size
        self.path = "unknown"

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        if shard.shape[0] * self.world_size != self.padded_tokens or shard.shape[1] != self.n:
            raise ValueError(
                f"gather vllm: shard {tuple(shard.shape)} × {self.world_size} ranks is not [{self.padded_tokens}, {self.n}]"
            )
        _PATH_PROBE["last"] = None
        out = self._fn(shard.contiguous())
        seen = _PATH_PROBE["last"]
        self.path = "unknown" if seen is None else seen
        GATHER_PATHS[self.padded_tokens] = self.path
        return out


_PATH_PROBE: dict[str, str | None] = {"last": None}


def _install_path_probe() -> None:
    """Wrap the TP group's ``custom_all_gather`` to note whether it took the gather (``custom``) or
    declined it (``nccl``). Python-level only: in a CUDA graph it runs at capture, not at replay."""
    from vllm.distributed.parallel_state import get_tp_group

    comm = getattr(get_tp_group(), "device_communicator", None)
    original = getattr(comm, "custom_all_gather", None)
    if comm is None or original is None or getattr(original, "_spx_probe", False):
        return

    def probed(inp: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(inp, *args, **kwargs)
        _PATH_PROBE["last"] = "nccl" if out is None else "custom"
        return out

    probed._spx_probe = True  # type: ignore[attr-defined]
    comm.custom_all_gather = probed


def build_vllm_gather(
    spec: ExperimentSpec, device: torch.device | str, padded_tokens: int, n: int, dtype: torch.dtype
) -> VllmGather:
    """vLLM's ``sp_all_gather`` after vLLM's distributed init, for ``[padded_tokens / TP, n]`` shards.

    Raises:
        RuntimeError: no importable vLLM ≥ 0.33; an unsupported device; the world is not the TP size.
        ValueError: ``padded_tokens`` not a multiple of TP.
    """
    del dtype  # the gather keeps its input's dtype; kept for the call-site signature
    ensure_vllm()
    init_vllm_runtime(device)
    from vllm.distributed.parallel_state import get_tp_group
    from vllm.models.common.ops.sequence_parallel import sp_all_gather

    world_size = int(get_tp_group().world_size)
    tp = spec.parallelism.tensor_parallel_size
    if world_size != tp:
        raise RuntimeError(f"gather vllm: vLLM's TP group has {world_size} ranks, the experiment's TP is {tp}")
    if padded_tokens % world_size:
        raise ValueError(f"gather vllm: {padded_tokens} tokens are not a multiple of TP {world_size}")
    _install_path_probe()
    return VllmGather(sp_all_gather, padded_tokens, n, world_size)


@contextlib.contextmanager
def vllm_graph_capture(device: torch.device | str) -> Iterator[Any]:
    """vLLM's ``graph_capture`` context (registers the custom all-gather's graph buffers at exit).

    Capture every split-candidate CUDA graph of a point inside one such context, on every rank in
    the same order; eager calls inside it are warm-ups (the custom collectives return placeholders).

    Raises:
        RuntimeError: no importable vLLM ≥ 0.33; not a CUDA device.
    """
    ensure_vllm()
    init_vllm_runtime(device)
    from vllm.distributed.parallel_state import graph_capture

    dev = resolve_device(device)
    if dev.type != "cuda":
        raise RuntimeError(f"vLLM's graph_capture needs a CUDA device, not {dev}")
    with graph_capture(dev) as ctx:
        yield ctx
