"""Re-model the all-gather of a one-GPU run under another gather prior, without re-measuring.

With fewer GPUs than TP the bench measures the shard GEMM and adds a modelled all-gather to every
split sample (``split = shard GEMM + gather``, :mod:`spx.bench.kernel`). The shard GEMM samples are
the measurement; the gather is arithmetic. So a result can be judged under another prior (e.g. the
H20-calibrated one against the datasheet one, :class:`spx.api.gather_model.GatherModelSpec`) by subtracting
each point's recorded ``gatherUs`` from its split samples and adding the new model's. Pure: no I/O.
"""

from __future__ import annotations

from spx.analysis.stats import candidate_stats
from spx.api.gather_model import GatherModelSpec
from spx.api.result import KernelResult

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def remodel_gather(result: KernelResult, model: GatherModelSpec) -> KernelResult:
    """``result`` with every modelled gather replaced by ``model``'s; the spec records the new model.

    Split samples (µs) become ``sample − gatherUs + model.gather_us(M_pad, N, dtype bytes, TP)``; medians,
    quartiles and IQR are recomputed (:func:`spx.analysis.stats.candidate_stats`); replicated samples and
    the shard GEMM are untouched.

    Raises:
        ValueError: the result's gather was measured (nothing to re-model), or a modelled point lacks
            ``gatherUs``.
    """
    if result.gather_source != "modelled":
        raise ValueError(f"gatherSource is {result.gather_source!r}: only a modelled gather can be re-modelled")
    spec = result.spec
    n = spec.projection.output_size
    dtype_bytes = DTYPE_BYTES[spec.projection.activation_dtype]
    tp = spec.parallelism.tensor_parallel_size
    points = []
    for p in result.points:
        if p.gather_source != "modelled":
            points.append(p)
            continue
        if p.gather_us is None:
            raise ValueError(f"point at {p.tokens} tokens is modelled but has no gatherUs to subtract")
        new = model.gather_us(p.padded_tokens, n, dtype_bytes, tp)
        samples = [s - p.gather_us + new for s in p.split.samples_us]
        points.append(p.model_copy(update={"gather_us": new, "split": candidate_stats(samples, p.split.kernels)}))
    kernel = spec.kernel.model_copy(update={"gather_model": model})
    return result.model_copy(update={"points": points, "spec": spec.model_copy(update={"kernel": kernel})})
