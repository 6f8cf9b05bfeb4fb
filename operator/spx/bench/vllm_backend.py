"""The only module of spx.bench that touches vLLM: ``gemmBackend: vllm`` and ``gather: vllm``.

vLLM is imported lazily, inside functions, and only here; without it every entry point raises
``RuntimeError("gemmBackend vllm needs an importable vLLM ≥ 0.33 ...")`` (CI and CPU machines cannot
install vLLM; the bench image has it).

- :func:`build_vllm_projection` builds ``fused_wqa_wkv`` as vLLM ≥ 0.33 builds it in
  ``vllm/models/deepseek_v41/attention.py``: ``MergedColumnParallelLinear(hidden, output_sizes,
  bias=False, disable_tp=True)`` with DeepSeek-V4's FP8 quantisation config (``quant_method: fp8``,
  dynamic activations, ``weight_block_size: [128, 128]``, ``scale_fmt: ue8m0``), loads the random
  weight in the checkpoint's format (FP8 e4m3 + one power-of-two ``weight_scale_inv`` per 128×128
  block) shard by shard through the parameters' own ``weight_loader`` (shard 0 = ``wq_a``, 1 =
  ``wkv``, as the model's stacked-params mapping does), then runs the quant method's
  ``process_weights_after_loading`` — so the GEMM kernel timed is the one vLLM picks on this GPU
  (DeepGEMM, CUTLASS block-FP8 or Triton; CUPTI's kernel names say which).
- :func:`build_vllm_gather` returns vLLM's sequence-parallel all-gather
  (``vllm.models.common.ops.sequence_parallel.sp_all_gather``: the custom all-gather below its size
  limit, NCCL above) after vLLM's distributed init over this run's ranks, and records which of the
  two paths ran for each token count (:data:`GATHER_PATHS`).
- :func:`vllm_graph_capture` is vLLM's ``graph_capture`` context: capture the split candidate's
  CUDA graphs inside it (all ranks, same order) so the custom all-gather uses registered buffers as in
  vLLM's own graphs; outside it the custom path copies its input into its IPC buffer first.

Nothing here can run in CI; it is exercised on a GPU box with vLLM installed (``docs/serving.md``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from spx.api.spec import FP8_BLOCK, ExperimentSpec

if TYPE_CHECKING:
    from types import ModuleType

    import torch

    from spx.bench.weights import Fp8BlockWeight

MIN_VLLM = (0, 33)
#: Set to 1 to accept a vLLM whose version string says < 0.33 (a patched or source build).
ENV_SKIP_VERSION_CHECK = "SPX_VLLM_SKIP_VERSION_CHECK"

#: DeepSeek-V4/V4.1's ``quantization_config`` as in the checkpoint's ``config.json``.
DEEPSEEK_V4_FP8_CONFIG: dict[str, Any] = {
    "quant_method": "fp8",
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "scale_fmt": "ue8m0",
    "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
}

#: Which gather path ran, per padded token count: ``custom`` (vLLM's custom all-gather), ``nccl``
#: (it declined: over its size limit, or disabled), ``unknown`` (this vLLM does not route through a
#: ``custom_all_gather`` spx can observe).
GATHER_PATHS: dict[int, str] = {}

_HINT = (
    "vLLM is not a dependency of spx: run in the bench image (vLLM base + spx[bench]) or "
    "`pip install 'vllm>=0.33'` on a CUDA machine. CI and CPU-only machines cannot run the vLLM "
    "backends; use gemmBackend torch-fp8/torch-bf16 and gather nccl/gloo/modelled there."
)


def _parse_version(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a vLLM version, ``None`` when it says nothing (e.g. ``0.1.dev1+g…`` of an
    untagged source build)."""
    m = re.match(r"^(\d+)\.(\d+)", version)
    if m is None:
        return None
    parsed = (int(m.group(1)), int(m.group(2)))
    if parsed == (0, 1) and "dev" in version:
        return None
    return parsed


def ensure_vllm() -> ModuleType:
    """Import vLLM and check its version.

    Raises:
        RuntimeError: ``gemmBackend vllm needs an importable vLLM ≥ 0.33 …`` when ``import vllm``
            fails or its version is older (set ``SPX_VLLM_SKIP_VERSION_CHECK=1`` to accept a patched
            older build).
    """
    try:
        vllm = importlib.import_module("vllm")
    except Exception as err:  # ImportError, or a broken install raising anything on import
        raise RuntimeError(
            f"gemmBackend vllm needs an importable vLLM ≥ {MIN_VLLM[0]}.{MIN_VLLM[1]} "
            f"(import vllm failed: {type(err).__name__}: {err}). {_HINT}"
        ) from err
    version = str(getattr(vllm, "__version__", "unknown"))
    parsed = _parse_version(version)
    if parsed is not None and parsed < MIN_VLLM and os.environ.get(ENV_SKIP_VERSION_CHECK) != "1":
        raise RuntimeError(
            f"gemmBackend vllm needs an importable vLLM ≥ {MIN_VLLM[0]}.{MIN_VLLM[1]} (found {version}, "
            f"without DeepSeek-V4.1's token split); set {ENV_SKIP_VERSION_CHECK}=1 for a patched build. {_HINT}"
        )
    return vllm


def _require_cuda(device: torch.device | str) -> torch.device:
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        raise RuntimeError(f"gemmBackend/gather vllm needs a CUDA GPU (device is {dev}); use spec.kernel.device cuda")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _vllm_config(world_size: int) -> Any:
    """A ``VllmConfig`` whose parallel config matches this run (custom all-reduce enabled)."""
    from vllm.config import ParallelConfig, VllmConfig

    try:
        parallel = ParallelConfig(tensor_parallel_size=world_size, disable_custom_all_reduce=False)
        return VllmConfig(parallel_config=parallel)
    except Exception:
        return VllmConfig()


_RUNTIME: dict[str, Any] = {}


def init_vllm_runtime(device: torch.device | str) -> Any:
    """vLLM's distributed init over this run's ranks, once per process; returns the ``VllmConfig``.

    Uses the existing ``torch.distributed`` world when the bench already initialised it (vLLM reuses
    it), else ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (``env://``), else a single local rank. The TP
    group is the whole world, as in a TP-only deployment; custom all-reduce is enabled.
    """
    if "config" in _RUNTIME:
        return _RUNTIME["config"]
    ensure_vllm()
    import torch
    import torch.distributed as dist
    from vllm.config import set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    dev = _require_cuda(device)
    torch.cuda.set_device(dev)
    if dist.is_initialized():
        rank, world_size = dist.get_rank(), dist.get_world_size()
        init_method = "env://"
    else:
        rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        init_method = "env://" if world_size > 1 else f"tcp://127.0.0.1:{_free_port()}"
    local_rank = int(os.environ.get("LOCAL_RANK", dev.index if dev.index is not None else rank))
    config = _vllm_config(world_size)
    with set_current_vllm_config(config):
        set_custom = getattr(ps, "set_custom_all_reduce", None)
        if set_custom is not None:
            set_custom(True)
        if not ps.model_parallel_is_initialized():
            ps.init_distributed_environment(
                world_size=world_size, rank=rank, distributed_init_method=init_method, local_rank=local_rank, backend="nccl"
            )
            ps.ensure_model_parallel_initialized(world_size, 1)
    _RUNTIME["config"] = config
    return config


class VllmProjection:
    """``fused_wqa_wkv`` as vLLM builds it; calling it runs the layer's forward (``x[M, K] → y[M, N]``)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        result: torch.Tensor = out[0] if isinstance(out, tuple) else out
        return result

    def describe(self) -> dict[str, str]:
        """The quant method and linear kernel class vLLM chose (CUPTI names say which kernels ran)."""
        qm = self.layer.quant_method
        info = {"layer": type(self.layer).__name__, "quantMethod": type(qm).__name__}
        for attr in ("kernel", "fp8_linear", "w8a8_block_fp8_linear"):
            obj = getattr(qm, attr, None)
            if obj is not None:
                info["linearKernel"] = getattr(obj, "__name__", type(obj).__name__)
                break
        return info


def _load_checkpoint_weight(layer: Any, weight: Fp8BlockWeight, output_sizes: list[int]) -> None:
    """Load ``weight`` shard by shard through the parameters' ``weight_loader``, then post-process."""
    params = dict(layer.named_parameters())
    w_param = params.get("weight")
    s_param = params.get("weight_scale_inv", params.get("weight_scale"))
    if w_param is None or s_param is None:
        raise RuntimeError(
            f"vLLM's Fp8 linear method created parameters {sorted(params)}; spx expects 'weight' and "
            f"'weight_scale_inv' (block FP8): this vLLM's FP8 block format is not the one spx knows"
        )
    row = 0
    for shard_id, n in enumerate(output_sizes):
        w_shard = weight.weight[row : row + n].to(w_param.device)
        s_shard = weight.scale[row // FP8_BLOCK : (row + n) // FP8_BLOCK].to(device=s_param.device, dtype=s_param.dtype)
        w_param.weight_loader(w_param, w_shard, shard_id)
        s_param.weight_loader(s_param, s_shard, shard_id)
        row += n
    layer.quant_method.process_weights_after_loading(layer)


def build_vllm_projection(
    spec: ExperimentSpec, device: torch.device | str, weight: Fp8BlockWeight | None = None
) -> VllmProjection:
    """vLLM's ``MergedColumnParallelLinear(hidden, output_sizes, disable_tp=True)`` with DeepSeek-V4's
    FP8 block config, holding ``weight`` (default: random from ``spec.kernel.seed``).

    Raises:
        RuntimeError: no importable vLLM ≥ 0.33; not a CUDA device; ``weightFormat`` is not
            ``fp8-block128-ue8m0``; vLLM's FP8 parameters are not the block format spx knows.
    """
    ensure_vllm()
    import torch

    if spec.projection.weight_format != "fp8-block128-ue8m0":
        raise RuntimeError(
            f"gemmBackend vllm builds DeepSeek-V4's FP8 block layer; weightFormat {spec.projection.weight_format} "
            f"is not supported (use fp8-block128-ue8m0)"
        )
    dev = _require_cuda(device)
    config = init_vllm_runtime(dev)
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    proj = spec.projection
    if weight is None:
        from spx.bench.weights import random_fp8_block_weight

        gen = torch.Generator(device=dev).manual_seed(spec.kernel.seed)
        weight = random_fp8_block_weight(proj.output_size, proj.hidden_size, dev, gen)
    if tuple(weight.weight.shape) != (proj.output_size, proj.hidden_size):
        raise ValueError(f"weight is {tuple(weight.weight.shape)}, the projection needs {(proj.output_size, proj.hidden_size)}")
    dtype = getattr(torch, proj.activation_dtype)
    quant_config = Fp8Config.from_config(dict(DEEPSEEK_V4_FP8_CONFIG))
    previous_dtype = torch.get_default_dtype()
    with set_current_vllm_config(config), torch.device(dev):
        torch.set_default_dtype(dtype)
        try:
            layer = MergedColumnParallelLinear(
                proj.hidden_size,
                list(proj.output_sizes),
                bias=False,
                params_dtype=dtype,
                quant_config=quant_config,
                prefix=f"model.layers.0.attn.{proj.name}",
                disable_tp=True,
            )
            _load_checkpoint_weight(layer, weight, list(proj.output_sizes))
        finally:
            torch.set_default_dtype(previous_dtype)
    layer.eval()
    return VllmProjection(layer)


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
        RuntimeError: no importable vLLM ≥ 0.33; not a CUDA device; this vLLM has no sequence-parallel
            all-gather; the world is not the TP size.
    """
    del dtype  # the gather keeps its input's dtype; kept for the call-site signature
    ensure_vllm()
    init_vllm_runtime(device)
    from vllm.distributed.parallel_state import get_tp_group

    try:
        from vllm.models.common.ops.sequence_parallel import sp_all_gather as fn
    except ImportError:
        try:
            from vllm.distributed import sequence_parallel_all_gather as fn
        except ImportError as err:
            raise RuntimeError(
                "gather vllm needs vLLM's sequence-parallel all-gather "
                "(vllm.models.common.ops.sequence_parallel.sp_all_gather, vLLM ≥ 0.33); this vLLM has none"
            ) from err
    world_size = int(get_tp_group().world_size)
    tp = spec.parallelism.tensor_parallel_size
    if world_size != tp:
        raise RuntimeError(f"gather vllm: vLLM's TP group has {world_size} ranks, the experiment's TP is {tp}")
    if padded_tokens % world_size:
        raise ValueError(f"gather vllm: {padded_tokens} tokens are not a multiple of TP {world_size}")
    _install_path_probe()
    return VllmGather(fn, padded_tokens, n, world_size)


@contextlib.contextmanager
def vllm_graph_capture(device: torch.device | str) -> Iterator[Any]:
    """vLLM's ``graph_capture`` context (registers the custom all-gather's graph buffers at exit).

    Capture every split-candidate CUDA graph of a point inside one such context, on every rank in
    the same order; eager calls inside it are warm-ups (the custom collectives return placeholders).

    Raises:
        RuntimeError: no importable vLLM ≥ 0.33.
    """
    ensure_vllm()
    init_vllm_runtime(device)
    from vllm.distributed.parallel_state import graph_capture

    dev = _require_cuda(device)
    with graph_capture(dev) as ctx:
        yield ctx
