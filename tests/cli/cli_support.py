"""Documents the CLI tests read: a real KernelResult of a made-up sweep (medians in µs)."""

from __future__ import annotations

from spx.analysis.stats import candidate_stats
from spx.api import Environment, ExperimentSpec, KernelResult, PointResult


def kernel_result(tokens: tuple[int, ...] = (6, 48, 384, 2048, 4096), tp: int = 8, complete: bool = True,
                  error: str | None = None) -> KernelResult:
    """A result whose split loses below ~100 tokens and wins above (replicated 10 + 0.2·M µs, split 25 + 0.04·M)."""
    spec = ExperimentSpec.model_validate({"sweep": {"tokens": list(tokens)}, "parallelism": {"tensorParallelSize": tp}})
    points = []
    for t in tokens:
        rep, split = 10 + t * 0.2, 25 + t * 0.04
        padded = -(-t // tp) * tp
        points.append(PointResult(
            tokens=t, padded_tokens=padded, rows_per_rank=padded // tp,
            replicated=candidate_stats([rep * f for f in (0.99, 0.995, 1.0, 1.005, 1.01)]),
            split=candidate_stats([split * f for f in (0.99, 0.995, 1.0, 1.005, 1.01)]),
            gather_source="measured", max_abs_error=0.0,
        ))
    return KernelResult(
        spec=spec, environment=Environment(gpu="NVIDIA H200", gpu_count=tp, device="cuda"), world_size=tp,
        gemm_backend="torch-fp8", gather_backend="nccl", gather_source="measured", timer="cupti", device="cuda",
        cuda_graphs=True, points=points, complete=complete, error=error,
    )
