"""``gemmBackend: humming``: the MXFP8 linear kernel vLLM 0.33 runs for DeepSeek-V4.1 on SM90.

vLLM 0.33.0 ranks ``HummingMxfp8LinearKernel`` ahead of Marlin on compute capability 9.0
(``_HUMMING_PREFERRED_CAPABILITIES = frozenset({90})``,
``vllm/model_executor/layers/quantization/utils/humming/priority.py``) and pins
``humming-kernels==0.1.19`` (:data:`HUMMING_VERSION`). This module builds the projection the way that
kernel does, step by step, from the tensors vLLM holds after loading an MXFP8 checkpoint:

1. ``layer.weight``: float8_e4m3fn ``[N, K]``; ``layer.weight_scale``: uint8 ``[N, K/32]``, the
   checkpoint's 32×32 block scales expanded per row (:meth:`BlockFp8Weight.row_scales_e8m0`, vLLM's
   ``KMxfp8Static`` scale loader), viewed as ``float8_e8m0fnu``
   (``HummingMxfp8LinearKernel.process_weights_after_loading``).
2. ``convert_linear_layer_to_humming_standard`` (``utils/humming/linear.py``): the weight (output dim 0,
   input dim 1) viewed as int32 ``[N, K/4]``; the scale stays ``[N, K/32]``.
3. ``prepare_humming_linear_layer_config``: weight schema from vLLM's quant config
   (:data:`HUMMING_QUANT_CONFIG`), ``convert_humming`` with the merged column blocks as N stacks; the
   input schema of ``kMxfp8Dynamic`` (e4m3, group 32, e8m0 scales, dynamic) passed through
   ``check_and_fallback_input_schema`` (:func:`vllm_input_schema`, ported below because vLLM is not
   importable on the bench GPU): on SM90 it returns the 16-bit schema ("prefer wna16 for groupwise
   weight"), i.e. **W8A16**: bf16 activations, FP8 weights dequantised inside the kernel; then
   ``humming.transform.prepare_and_transform_humming_tensors`` with ``pad_n_to_multiple=256``,
   ``pad_k_to_multiple=128``.
4. ``apply_humming_linear``: ``humming.forward.humming_forward`` with vLLM's compute config
   (:data:`HUMMING_COMPUTE_CONFIG`, ``get_humming_linear_compute_config`` with vLLM's defaults
   ``VLLM_BATCH_INVARIANT=0``, ``VLLM_HUMMING_USE_F16_ACCUM=0``) and ``num_SMs × 8`` int32 locks
   (``vllm/utils/humming.py: create_humming_locks``).

The weights therefore start from the FP8 values and e8m0 bytes (not from an unquantised tensor, as
``humming.layer.HummingLayer.load_from_unquantized`` would), exactly as vLLM loads them. Humming
compiles its kernels with NVRTC on first use (~10 s for the first shape); the bench's eager warm-up
calls before CUDA-graph capture absorb that. CUPTI sees kernels named ``humming<...>``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from spx.api.spec import ExperimentSpec
from spx.bench.gemm.record import GemmKernel
from spx.vocabulary import MXFP8

if TYPE_CHECKING:
    import torch

    from spx.bench.gemm.projection import Projection
    from spx.bench.weights import BlockFp8Weight

#: ``humming-kernels`` version vLLM 0.33.0 pins (its wheel's ``Requires-Dist: humming-kernels[cu13]==0.1.19``).
HUMMING_VERSION: Final = "0.1.19"
#: ``HummingMxfp8LinearKernel.process_weights_after_loading``'s quant config (vLLM 0.33.0,
#: ``vllm/model_executor/kernels/linear/mxfp8/humming.py``).
HUMMING_QUANT_CONFIG: Final = {
    "quant_method": "humming",
    "dtype": "float8e4m3",
    "scale_dtype": "float8e8m0",
    "group_size": 32,
    "weight_scale_type": "group",
}
#: ``get_humming_linear_compute_config()`` with vLLM's default environment.
HUMMING_COMPUTE_CONFIG: Final = {"use_batch_invariant": False, "use_f16_accum": False, "gemm_type": "dense"}
#: ``prepare_humming_linear_layer_config``'s padding of the weight for the kernel.
PAD_N, PAD_K = 256, 128


def humming_available() -> tuple[bool, str]:
    """Whether the ``humming`` package is installed here (vLLM's ``has_humming()``: a module spec is
    found, nothing imported), and its version or why not. Never raises."""
    import importlib.util

    if importlib.util.find_spec("humming") is None:
        return False, "humming-kernels is not installed"
    try:
        version = importlib.metadata.version("humming-kernels")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    note = "" if version == HUMMING_VERSION else f", vLLM 0.33.0 pins {HUMMING_VERSION}"
    return True, f"humming-kernels {version} importable{note}"


def vllm_input_schema(weight_schema: Any, input_schema: Any, param_dtype: torch.dtype, sm_version: int) -> Any:
    """vLLM 0.33.0's ``check_and_fallback_input_schema(..., allow_fallback=True)``, ported.

    Source: ``vllm/model_executor/layers/quantization/utils/humming/schema.py`` (same branches, same
    order; logging dropped). ``weight_schema`` / ``input_schema`` are humming schemas, ``sm_version``
    e.g. 90. Returns the ``HummingInputSchema`` the kernel runs with.

    Raises:
        ValueError: no compatible input schema (vLLM raises the same).
    """
    from humming import dtypes
    from humming.config import InputQuantizationMode
    from humming.schema import HummingInputSchema

    fallback = {
        dtypes.float8e5m2: (dtypes.float8e4m3, dtypes.float8e3m4, dtypes.int8),
        dtypes.float8e4m3: (dtypes.float8e3m4, dtypes.int8),
        dtypes.float8e3m4: (dtypes.float8e4m3, dtypes.int8),
        dtypes.float4e2m1: (dtypes.float8e4m3, dtypes.float8e3m4, dtypes.int8),
        dtypes.float4e0m3: (dtypes.int4, dtypes.float8e4m3, dtypes.float8e3m4, dtypes.int8),
        dtypes.int8: (dtypes.float8e4m3, dtypes.float8e3m4),
        dtypes.int4: (dtypes.int8, dtypes.float8e4m3, dtypes.float8e3m4),
    }
    weight_schema = weight_schema.to_humming_schema(param_dtype)
    input_schema = input_schema.to_humming_schema(param_dtype)
    if input_schema.a_dtype in (dtypes.float6e2m3, dtypes.float6e3m2):
        input_schema.a_dtype = dtypes.float8e4m3
    a_dtype = input_schema.a_dtype
    input_bits = a_dtype.num_bits if a_dtype is not None else 16
    weight_group_size = weight_schema.weight_scale_group_size
    input_group_size = input_schema.input_scale_group_size

    def is_deprecated(dtype: Any) -> bool:
        if dtype is None or dtype.num_bits == 16:
            return False
        int4_old = dtype == dtypes.int4 and sm_version >= 90
        int8_old = dtype == dtypes.int8 and 103 <= sm_version < 110
        fp8_old = dtype.num_bits < 16 and 100 <= sm_version < 120
        return bool(int4_old or int8_old or fp8_old)

    if input_schema.is_compatible_with(weight_schema, param_dtype):
        if a_dtype is None or a_dtype.num_bits == 16:
            return input_schema
        if not is_deprecated(a_dtype):
            is_mxfp8 = (
                a_dtype.is_floating_point_type
                and a_dtype.num_bits == 8
                and input_group_size == 32
                and input_schema.input_scale_dtype == dtypes.float8e8m0
                and sm_version >= 120
            )
            if input_bits == 8 and (input_group_size > 0 or weight_group_size > 0) and not is_mxfp8:
                return HummingInputSchema()  # vLLM: "prefer wna16 for groupwise weight or groupwise input"
            return input_schema
    for dtype in (a_dtype, *fallback.get(a_dtype, ()), dtypes.DataType.from_any(param_dtype)):
        if dtype is None or is_deprecated(dtype):
            continue
        group_size, scale_dtype, mode = 0, dtypes.float32, InputQuantizationMode.DynamicToken
        if dtype.num_bits == 16:
            scale_dtype, mode = None, InputQuantizationMode.Disabled
        elif dtype in (dtypes.float8e4m3, dtypes.float8e3m4):
            channelwise = weight_schema.weight_scale_group_size == 0
            mx_weight = weight_schema.weight_scale_group_size == 32 and weight_schema.bs_dtype == dtypes.float8e8m0
            if sm_version >= 120 and (channelwise or mx_weight):
                group_size, scale_dtype, mode = 32, dtypes.float8e8m0, InputQuantizationMode.DynamicGroup
        candidate = HummingInputSchema(
            a_dtype=dtype, input_scale_group_size=group_size, input_scale_dtype=scale_dtype, input_quant_mode=mode
        )
        if candidate.is_compatible_with(weight_schema, param_dtype):
            return candidate
    raise ValueError(f"no compatible Humming input schema for {input_schema} with weight schema {weight_schema}")


@dataclass
class HummingLinear:
    """A prepared Humming MXFP8 linear: the transformed tensors, the layer config, and the call.

    ``__call__(x)``: ``x[M, K]`` bf16/fp16 CUDA → ``y[M, N]`` of the same dtype (output not padded).
    ``activation``: ``"W8A16"`` when the kernel runs on 16-bit activations, else ``"W8A8"``.
    """

    layer_config: Any
    tensors: dict[str, torch.Tensor]
    locks: torch.Tensor
    compute_config: str
    hadamard_block_size: int
    activation: str

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        from humming.forward import humming_forward

        mode = self.layer_config.input_quant_mode
        t = self.tensors
        out: torch.Tensor = humming_forward(
            self.layer_config,
            inputs=x.reshape(-1, x.size(-1)),
            weight=t["weight"],
            weight_scale=t.get("weight_scale"),
            zero_point=t.get("zero_point"),
            bias=None,
            weight_scale_2=t.get("weight_scale_2"),
            input_scale=t.get("input_scale") if mode.should_quantize else None,
            input_scale_2=t.get("input_scale_2") if mode.has_secondary_scale else None,
            hadamard_block_size=self.hadamard_block_size,
            locks=self.locks,
            compute_config=self.compute_config,
        )
        return out


def prepare_humming_linear(weight: BlockFp8Weight, output_sizes: list[int], dtype: torch.dtype, device: torch.device) -> HummingLinear:
    """Steps 1–3 of the module docstring for ``weight`` (MXFP8, ``[N, K]``) split into ``output_sizes``.

    ``dtype`` is the activation/output dtype (bf16 or fp16, vLLM's ``params_dtype``); ``device`` a CUDA
    device.

    Raises:
        RuntimeError: humming not importable, or ``device`` not CUDA.
        ValueError: ``sum(output_sizes) != N``, or humming finds no compatible input schema.
    """
    import torch

    ok, why = humming_available()
    if not ok:
        raise RuntimeError(f"gemmBackend humming: {why}; install it with `pip install humming-kernels=={HUMMING_VERSION}` "
                           "(the spx-operator[gpu] extra) on a CUDA machine, or use gemmBackend marlin/torch-bf16")
    if device.type != "cuda":
        raise RuntimeError(f"gemmBackend humming needs a CUDA GPU (device is {device}); use gemmBackend torch-bf16 on CPU")
    from humming import dtypes
    from humming.config import InputQuantizationMode
    from humming.schema import BaseWeightSchema, HummingInputSchema
    from humming.transform import prepare_and_transform_humming_tensors

    n, k = weight.shape
    if sum(output_sizes) != n:
        raise ValueError(f"output sizes {output_sizes} do not add up to the weight's N = {n}")
    with torch.cuda.device(device):
        # 1. what vLLM holds after load: fp8 [N, K] + e8m0 [N, K/32]; 2. humming standard layout
        w = weight.weight.to(device).contiguous()
        tensors = {
            "weight": w.view(n, -1).view(torch.int32),
            "weight_scale": weight.row_scales_e8m0().to(device).view(torch.float8_e8m0fnu),
        }
        # 3. schemas, conversion, vLLM's input-schema choice, transform
        weight_schema, tensors = BaseWeightSchema.from_config(dict(HUMMING_QUANT_CONFIG)).convert_humming(
            tensors=tensors, shape_n_stacks=list(output_sizes), shape_k_stacks=[k], param_dtype=dtype
        )
        mxfp8_dynamic = HummingInputSchema(  # vLLM quant_key_to_input_schema(kMxfp8Dynamic)
            a_dtype=dtypes.float8e4m3, input_scale_group_size=32, input_scale_dtype=dtypes.float8e8m0,
            input_quant_mode=InputQuantizationMode.DynamicGroup,
        )
        major, minor = torch.cuda.get_device_capability(device)
        input_schema = vllm_input_schema(weight_schema, mxfp8_dynamic, dtype, major * 10 + minor)
        config, tensors = prepare_and_transform_humming_tensors(
            tensors=tensors, shape_n=n, shape_k=k, weight_schema=weight_schema, input_schema=input_schema,
            pad_n_to_multiple=PAD_N, pad_k_to_multiple=PAD_K, has_bias=False, torch_dtype=dtype, device=device,
        )
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        locks = torch.zeros(sms * 8, dtype=torch.int32, device=device)
    a_bits = input_schema.a_dtype.num_bits if input_schema.a_dtype is not None else 16
    return HummingLinear(
        layer_config=config,
        tensors=tensors,
        locks=locks,
        compute_config=json.dumps(HUMMING_COMPUTE_CONFIG),
        hadamard_block_size=int(getattr(weight_schema, "hadamard_block_size", 0) or 0),
        activation="W8A16" if a_bits == 16 else f"W8A{a_bits}",
    )


def build_humming_projection(weight: BlockFp8Weight, spec: ExperimentSpec, device: torch.device) -> Projection:
    """``x[M, K] → y[M, N]`` through Humming as vLLM 0.33's ``HummingMxfp8LinearKernel`` runs it.

    ``weight`` must be 32×32-block MXFP8 (``weightFormat: mxfp8-block32-ue8m0``); activations are
    ``spec.projection.activationDtype`` (bf16 or fp16).

    Raises:
        ValueError: a weight that is not 32×32-block, or float32 activations (humming runs 16-bit ones).
        RuntimeError: see :func:`prepare_humming_linear`.
    """
    from spx.bench.gemm.projection import activation_dtype

    if weight.block != 32:
        raise ValueError(
            f"gemmBackend humming runs vLLM's MXFP8 path (32×32 blocks); the weight has {weight.block}×{weight.block} "
            "blocks: use weightFormat mxfp8-block32-ue8m0"
        )
    dtype = activation_dtype(spec)
    if dtype.itemsize != 2:
        raise ValueError("gemmBackend humming runs bf16/fp16 activations; set projection.activationDtype bfloat16")
    return prepare_humming_linear(weight, list(spec.projection.output_sizes), dtype, device)



#: The ``humming`` backend's record (:mod:`spx.bench.gemm.registry`). Minimum capability: vLLM 0.33's
#: ``HummingMxfp8LinearKernel.is_supported`` (``has_device_capability(75)``, ``kernels/linear/mxfp8/humming.py``).
KERNEL = GemmKernel(
    name="humming", runs="vLLM 0.33 HummingMxfp8LinearKernel, W8A16",
    formats=frozenset({MXFP8}), format_note="vLLM's MXFP8 path: 32×32 blocks, e8m0 scales",
    cuda=True, min_capability=75, w8a8_formats=frozenset(), ceiling=False, build=build_humming_projection,
    vllm_kernel="HummingMxfp8LinearKernel", install="`pip install 'spx-operator[gpu]'`", available=humming_available,
)
