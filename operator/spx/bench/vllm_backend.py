"""``gemmBackend: vllm``: DeepSeek-V4.1's ``fused_wqa_wkv`` built, loaded and run by vLLM's own classes.

With ``spx.bench.vllm_runtime`` (import, version, distributed init) and ``spx.bench.vllm_gather``
(``gather: vllm``, re-exported here) the only modules of spx.bench that touch vLLM; vLLM is imported
lazily, inside functions; without it every entry point raises ``RuntimeError("gemmBackend vllm needs
an importable vLLM ≥ 0.33 ...")``. Written against vLLM 0.33.0 (the ``vllm`` test stage of
``scripts/test.sh`` runs it against the real package on CPU).

- :func:`build_vllm_layer` builds ``fused_wqa_wkv`` as ``vllm/models/deepseek_v41/attention.py`` does:
  ``MergedColumnParallelLinear(5120, [1280, 512], bias=False, disable_tp=True)`` with the checkpoint's
  quantisation config (:func:`checkpoint_quant_config`). With V4.1's MXFP8 weights (32×32 UE8M0
  blocks) the config class is V4.1's ``DeepseekV4FP8Config``
  (``vllm/models/deepseek_v41/quant_config.py``), which sends ``[32, 32]`` + e8m0 to
  ``ModelOptLinearMethod`` (MXFP8: ``weight`` e4m3 ``[N, K]``, ``weight_scale`` uint8 ``[N, K/32]``);
  its ``create_weights`` picks the MXFP8 linear kernel (vLLM's ``init_mxfp8_linear_kernel``: on SM90
  ``HummingMxfp8LinearKernel``, ranked ahead of Marlin by ``prioritize_humming``). DeepSeek-V3-style
  128×128 weights use ``Fp8Config`` → ``Fp8LinearMethod`` (``weight_scale_inv`` float32).
  The weight is then loaded in the checkpoint's layout (``wq_a`` = shard 0, ``wkv`` = shard 1, one
  ``scale`` per block) through each parameter's own ``weight_loader``, as the model's
  ``load_weights`` does (the MXFP8 loader expands the 32×32 scales to rows itself).
- :func:`build_vllm_projection` also runs ``process_weights_after_loading`` (the kernel's repack) and
  returns a :class:`VllmProjection`; :meth:`VllmProjection.split` is ``_fused_wqa_wkv_gemm``'s split
  path: ``sp_all_gather(layer(sp_shard(x)))[:M]``.

The model config vLLM needs outside a model: building a linear layer reads
``get_current_vllm_config().model_config`` (``.dtype`` in ``ModelOptLinearMethod.__init__`` /
``Fp8LinearMethod.__init__``; ``.hf_config.expert_dtype`` in ``DeepseekV4FP8Config.is_scale_e8m0``),
which is ``None`` outside an engine. vLLM's own ``tests/quantization/test_fp8.py`` attaches a
``SimpleNamespace(dtype=...)``; :func:`layer_model_config` does the same with V4.1's ``hf_config``
fields.

On CPU (``device: cpu``, ``VLLM_TARGET_DEVICE=cpu``) vLLM 0.33 registers no MXFP8 linear kernel, so
``create_weights`` fails ("Failed to find a kernel that can implement the MXFP8 linear layer"). For
the CPU pipeline spx then registers vLLM's own ``EmulationMxfp8LinearKernel`` (dequantise once to
BF16, ``F.linear``) for the CPU platform through vLLM's ``register_linear_kernel`` and says so in
:meth:`VllmProjection.describe` (``kernelNote``); its timings are CPU timings of an emulation, never
the GPU kernel's. On a GPU the kernel vLLM picks is the one timed (CUPTI's kernel names say which).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from spx.api.projection import WEIGHT_FORMAT_BLOCK
from spx.api.spec import ExperimentSpec
from spx.bench.vllm_gather import GATHER_PATHS, VllmGather, build_vllm_gather, vllm_graph_capture
from spx.bench.vllm_runtime import (
    ENV_SKIP_VERSION_CHECK,
    MIN_VLLM,
    ensure_vllm,
    init_vllm_runtime,
    resolve_device,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "ENV_SKIP_VERSION_CHECK", "GATHER_PATHS", "MIN_VLLM", "MXFP8_GROUP", "VllmGather", "VllmLayerInfo",
    "VllmProjection", "build_vllm_gather", "build_vllm_layer", "build_vllm_projection", "resolve_device",
    "checkpoint_quant_config", "checkpoint_tensors", "ensure_vllm", "init_vllm_runtime", "layer_model_config",
    "load_checkpoint_weight", "mxfp8_kernel_candidates", "vllm_graph_capture", "vllm_quant_config",
]

#: vLLM's MXFP8 group size (``MXFP8_BLOCK_SIZE`` in ``layers/quantization/utils/mxfp8_utils.py``).
MXFP8_GROUP = 32


class BlockFp8WeightLike(Protocol):
    """What spx passes in (``spx.bench.weights``): ``weight`` float8_e4m3fn ``[N, K]``, ``scale``
    float32 ``[N/block, K/block]`` powers of two, ``block`` (32 or 128; absent = 128)."""

    weight: torch.Tensor
    scale: torch.Tensor


def checkpoint_quant_config(block: int) -> dict[str, Any]:
    """The checkpoint's ``quantization_config`` (``config.json``) for ``block``×``block`` UE8M0 blocks.

    32: DeepSeek-V4.1 (MXFP8 linears); 128: DeepSeek-V3/V3.1 style.

    Raises:
        ValueError: another block size.
    """
    if block not in (32, 128):
        raise ValueError(f"FP8 weight block {block}: vLLM's DeepSeek configs know 32 (MXFP8, V4.1) and 128 (V3)")
    return {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "scale_fmt": "ue8m0",
        "weight_block_size": [block, block],
    }


def layer_model_config(dtype: torch.dtype, quant_config: dict[str, Any]) -> Any:
    """What vLLM reads of ``model_config`` while building a DeepSeek-V4.1 linear layer outside a model.

    ``dtype``: the activation dtype (``ModelOptLinearMethod`` / ``Fp8LinearMethod`` take their input and
    output dtype from it); ``hf_config``: ``model_type`` deepseek_v41, ``expert_dtype`` fp4 (V4.1: MXFP4
    experts, hence e8m0 linear scales, ``DeepseekV4FP8Config.is_scale_e8m0``) and the checkpoint's
    ``quantization_config``. A namespace, as vLLM's ``tests/quantization/test_fp8.py`` attaches one: a
    full ``ModelConfig`` needs the checkpoint's files.
    """
    from types import SimpleNamespace

    hf_config = SimpleNamespace(model_type="deepseek_v41", expert_dtype="fp4", quantization_config=dict(quant_config))
    return SimpleNamespace(dtype=dtype, hf_config=hf_config)


def vllm_quant_config(block: int) -> Any:
    """vLLM's quantisation config object for the checkpoint's ``block``: V4.1's ``DeepseekV4FP8Config``
    (32) or ``Fp8Config`` (128), built with ``from_config`` from :func:`checkpoint_quant_config`."""
    cfg = checkpoint_quant_config(block)
    if block == MXFP8_GROUP:
        from vllm.models.deepseek_v41.quant_config import DeepseekV4FP8Config

        return DeepseekV4FP8Config.from_config(cfg)
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    return Fp8Config.from_config(cfg)


def mxfp8_kernel_candidates(compute_capability: int | None) -> list[str]:
    """vLLM's MXFP8 linear kernel classes in the order ``init_mxfp8_linear_kernel`` tries them on a CUDA
    GPU of ``compute_capability`` (e.g. 90), after ``prioritize_humming``; the first supported one runs.

    Reads vLLM 0.33's ``_POSSIBLE_MXFP8_KERNELS`` (``model_executor/kernels/linear/__init__.py``); ``[]``
    when this vLLM has none.
    """
    ensure_vllm()
    from vllm.model_executor.kernels import linear as kernels
    from vllm.model_executor.layers.quantization.utils.humming.priority import prioritize_humming
    from vllm.platforms import PlatformEnum

    possible = list(getattr(kernels, "_POSSIBLE_MXFP8_KERNELS", {}).get(PlatformEnum.CUDA, []))
    return [k.__name__ for k in prioritize_humming(possible, compute_capability)]


def _ensure_cpu_mxfp8_kernel() -> str | None:
    """On vLLM's CPU platform without an MXFP8 linear kernel, register vLLM's
    ``EmulationMxfp8LinearKernel`` for it; returns the note to record, ``None`` if nothing was needed."""
    from vllm.model_executor.kernels import linear as kernels
    from vllm.model_executor.kernels.linear.mxfp8.emulation import EmulationMxfp8LinearKernel
    from vllm.platforms import PlatformEnum

    registered = getattr(kernels, "_POSSIBLE_MXFP8_KERNELS", {}).get(PlatformEnum.CPU, [])
    note = (
        "vLLM registers no MXFP8 linear kernel for its CPU platform; spx registered vLLM's "
        "EmulationMxfp8LinearKernel (BF16 dequantised at load, F.linear) for CPU: a pipeline check, not a GPU kernel"
    )
    if EmulationMxfp8LinearKernel in registered:
        return note
    if registered:
        return None
    kernels.register_linear_kernel(EmulationMxfp8LinearKernel, PlatformEnum.CPU, "mxfp8")
    return note


def _weight_block(weight: BlockFp8WeightLike, spec: ExperimentSpec) -> int:
    """The weight's block edge (``weight.block``, 128 when absent), checked against ``weightFormat``."""
    block = int(getattr(weight, "block", 128))
    fmt = spec.projection.weight_format
    expected = WEIGHT_FORMAT_BLOCK[fmt]
    if expected is None:
        blocked = [f for f, b in WEIGHT_FORMAT_BLOCK.items() if b is not None]
        raise ValueError(
            f"gemmBackend vllm loads FP8 block weights as the checkpoint stores them; weightFormat {fmt} is not "
            f"one (use {' or '.join(blocked)})"
        )
    if expected != block:
        raise ValueError(f"weightFormat {fmt} has {expected}×{expected} blocks, the weight has {block}×{block}")
    return block


def checkpoint_tensors(weight: BlockFp8WeightLike, block: int, output_sizes: list[int]) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    """``(shard_id, weight, scale)`` per output shard as the checkpoint stores them (``wq_a``, ``wkv``).

    weight: float8_e4m3fn ``[n, K]``; scale: ``[n/block, K/block]``, float8_e8m0fnu (V4.1's MXFP8
    ``scale``, the biased exponent bytes) for block 32, float32 (``weight_scale_inv``) for 128.

    Raises:
        ValueError: a shard not a multiple of ``block`` rows; scales that are not powers of two.
    """
    import torch

    out = []
    row = 0
    for shard_id, n in enumerate(output_sizes):
        if n % block:
            raise ValueError(f"output shard {shard_id} has {n} rows, not a multiple of the {block}-row block")
        w = weight.weight[row : row + n]
        s = weight.scale[row // block : (row + n) // block].float()
        if block == MXFP8_GROUP:
            exp = torch.log2(s)
            if not torch.equal(exp, exp.round()) or exp.min() < -127 or exp.max() > 127:
                raise ValueError("MXFP8 scales must be powers of two in [2^-127, 2^127] (UE8M0)")
            s = (exp.to(torch.int32) + 127).to(torch.uint8).view(torch.float8_e8m0fnu)
        out.append((shard_id, w, s))
        row += n
    return out


def load_checkpoint_weight(layer: Any, weight: BlockFp8WeightLike, block: int, output_sizes: list[int]) -> None:
    """Load ``weight`` shard by shard through the parameters' ``weight_loader`` (no post-processing).

    Raises:
        RuntimeError: the layer's parameters are not the ones vLLM 0.33 creates for this format.
    """
    params = dict(layer.named_parameters())
    scale_name = "weight_scale" if block == MXFP8_GROUP else "weight_scale_inv"
    w_param, s_param = params.get("weight"), params.get(scale_name)
    if w_param is None or s_param is None:
        raise RuntimeError(
            f"vLLM's {type(layer.quant_method).__name__} created parameters {sorted(params)}; spx expects "
            f"'weight' and '{scale_name}' for {block}×{block} blocks: this vLLM's format is not the one spx knows"
        )
    for shard_id, w, s in checkpoint_tensors(weight, block, output_sizes):
        w_param.weight_loader(w_param, w.to(w_param.device), shard_id)
        s_param.weight_loader(s_param, s.to(s_param.device), shard_id)


@dataclass
class VllmLayerInfo:
    """What vLLM chose for the layer: class names, the platform, and why where it matters."""

    quant_config: str
    quant_method: str
    linear_kernel: str
    platform: str
    linear_backend: str = "auto"
    kernel_note: str | None = None
    #: vLLM's MXFP8 kernel order on a CUDA GPU of ``candidates_cc`` (this GPU's; 90 on CPU, the target).
    candidates: list[str] = field(default_factory=list)
    candidates_cc: int = 90

    def to_dict(self) -> dict[str, str]:
        out = {"layer": "MergedColumnParallelLinear", "quantConfig": self.quant_config, "quantMethod": self.quant_method,
               "linearKernel": self.linear_kernel, "linearBackend": self.linear_backend, "platform": self.platform}
        if self.kernel_note:
            out["kernelNote"] = self.kernel_note
        if self.candidates:
            out[f"kernelCandidatesSm{self.candidates_cc}"] = ",".join(self.candidates)
        return out


def _kernel_name(quant_method: Any) -> str:
    for attr in ("kernel", "fp8_linear", "w8a8_block_fp8_linear"):
        obj = getattr(quant_method, attr, None)
        if obj is not None:
            return str(getattr(obj, "__name__", type(obj).__name__))
    return "unknown"


def build_vllm_layer(
    spec: ExperimentSpec, device: torch.device | str, weight: BlockFp8WeightLike, linear_backend: str = "auto"
) -> tuple[Any, VllmLayerInfo]:
    """vLLM's ``fused_wqa_wkv`` with ``weight`` loaded through its loaders (not yet post-processed).

    ``linear_backend`` is ``vllm serve --linear-backend`` (vLLM's ``KernelConfig.linear_backend``):
    ``auto`` (vLLM's ranking: Humming on SM90), ``marlin`` (``MarlinMxfp8LinearKernel``),
    ``humming``, ``emulation``, … Where the backend has no kernel for the layer, vLLM falls back to
    ``auto`` (and logs a warning); :attr:`VllmLayerInfo.linear_kernel` says what it chose.

    Raises:
        RuntimeError: no importable vLLM ≥ 0.33; an unsupported device; vLLM found no kernel; its
            parameters are not the format spx knows.
        ValueError: ``weightFormat`` not an FP8 block format or not the weight's; a wrong weight shape;
            a ``linear_backend`` vLLM does not know (its message lists the ones it does).
    """
    ensure_vllm()
    import torch

    proj = spec.projection
    block = _weight_block(weight, spec)
    if tuple(weight.weight.shape) != (proj.output_size, proj.hidden_size):
        raise ValueError(f"weight is {tuple(weight.weight.shape)}, the projection needs {(proj.output_size, proj.hidden_size)}")
    dev = resolve_device(device)
    init_vllm_runtime(dev)
    from pydantic import ValidationError
    from vllm.config import KernelConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear

    try:
        kernel_config = KernelConfig(linear_backend=linear_backend)  # type: ignore[arg-type]
    except ValidationError as err:
        raise ValueError(f"linear backend {linear_backend[:64]!r}: {err.errors()[0]['msg']}") from err
    note = _ensure_cpu_mxfp8_kernel() if dev.type == "cpu" and block == MXFP8_GROUP else None
    dtype = getattr(torch, proj.activation_dtype)
    quant_config = vllm_quant_config(block)
    config = VllmConfig(kernel_config=kernel_config)
    config.model_config = layer_model_config(dtype, checkpoint_quant_config(block))
    previous_dtype = torch.get_default_dtype()
    with set_current_vllm_config(config), torch.device(dev):
        torch.set_default_dtype(dtype)
        try:
            layer = MergedColumnParallelLinear(
                proj.hidden_size, list(proj.output_sizes), bias=False, params_dtype=dtype, quant_config=quant_config,
                prefix=f"model.layers.0.attn.{proj.name}", disable_tp=True,
            )
        except ValueError as err:
            raise RuntimeError(f"vLLM could not build {proj.name} on {dev}: {err}") from err
        finally:
            torch.set_default_dtype(previous_dtype)
        load_checkpoint_weight(layer, weight, block, list(proj.output_sizes))
    return layer, _layer_info(layer, quant_config, dev, block, linear_backend, note)


def _layer_info(layer: Any, quant_config: Any, dev: torch.device, block: int, linear_backend: str,
                note: str | None) -> VllmLayerInfo:
    """What vLLM chose for ``layer`` on ``dev``: its quant config, method and kernel class, and (MXFP8) the
    kernels it ranks on this GPU's compute capability (SM90's when ``dev`` is not a GPU)."""
    from vllm.platforms import current_platform

    capability = current_platform.get_device_capability() if dev.type == "cuda" else None
    cc = capability.to_int() if capability is not None else 90
    return VllmLayerInfo(
        quant_config=type(quant_config).__name__,
        quant_method=type(layer.quant_method).__name__,
        linear_kernel=_kernel_name(layer.quant_method),
        platform=f"cuda sm{cc}" if dev.type == "cuda" else dev.type,
        linear_backend=linear_backend,
        kernel_note=note,
        candidates=mxfp8_kernel_candidates(cc) if block == MXFP8_GROUP else [],
        candidates_cc=cc,
    )


class VllmProjection:
    """``fused_wqa_wkv`` as vLLM builds it; calling it runs the layer's forward (``x[M, K] → y[M, N]``)."""

    def __init__(self, layer: Any, info: VllmLayerInfo) -> None:
        self.layer = layer
        self.info = info

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        result: torch.Tensor = out[0] if isinstance(out, tuple) else out
        return result

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """``_fused_wqa_wkv_gemm``'s split path: ``sp_all_gather(layer(sp_shard(x)))[:M]`` over vLLM's TP
        group (every rank calls it with the same ``x``)."""
        from vllm.models.common.ops.sequence_parallel import sp_all_gather, sp_shard

        out: torch.Tensor = sp_all_gather(self(sp_shard(x)))[: x.shape[0]]
        return out

    def describe(self) -> dict[str, str]:
        """The quant config, quant method and linear kernel class vLLM chose, and the platform."""
        return self.info.to_dict()


def build_vllm_projection(
    spec: ExperimentSpec, device: torch.device | str, weight: BlockFp8WeightLike, linear_backend: str = "auto"
) -> VllmProjection:
    """:func:`build_vllm_layer`, then the quant method's ``process_weights_after_loading`` (the kernel's
    weight repack: Humming's or Marlin's layout), as vLLM's model loader does after ``load_weights``.

    Raises:
        RuntimeError / ValueError: see :func:`build_vllm_layer`.
    """
    import torch

    layer, info = build_vllm_layer(spec, device, weight, linear_backend)
    with torch.device(layer.weight.device):
        layer.quant_method.process_weights_after_loading(layer)
    layer.eval()
    return VllmProjection(layer, info)
