"""Points, candidate statistics and results of made-up sweeps (times in µs), built through the real
models and :func:`spx.analysis.stats.candidate_stats`: one builder per shape instead of one per test file.

- :func:`kernel_point` — a judged ``KernelPoint`` (status): split 100 µs, replicated 100·speedup µs;
- :func:`candidate` — ``CandidateStats`` of samples ``median·(1 ± spread)``;
- :func:`point_result` — a measured ``PointResult`` (the bench's) from replicated and split samples;
- :func:`kernel_result` — a whole ``KernelResult`` whose split loses below ~100 tokens and wins above.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from spx.analysis.stats import candidate_stats
from spx.api import CandidateStats, Environment, ExperimentSpec, KernelPoint, KernelResult, PointResult

#: The seed PR's 8× H20 kernel table (docs/seed.md), as the package ships it for ``spx predict``.
H20_TABLE = Path(str(files("spx") / "data" / "h20_tp8_fused_wqa_wkv.csv"))
H20_CSV = H20_TABLE.read_text(encoding="utf-8")


def kernel_point(tokens: int, speedup: float, *, max_abs_error: float | None = None, decided: bool = True,
                 rep_iqr: float = 0.0, split_iqr: float = 0.0, tp: int = 8) -> KernelPoint:
    """A judged point at ``tokens``: split 100 µs, replicated ``100·speedup`` µs, IQRs in percent."""
    return KernelPoint(
        tokens=tokens, rows_per_rank=-(-tokens // tp), replicated_us=100.0 * speedup, split_us=100.0, speedup=speedup,
        iqr_pct=max(rep_iqr, split_iqr), replicated_iqr_pct=rep_iqr, split_iqr_pct=split_iqr,
        max_abs_error=max_abs_error, decided=decided,
    )


def candidate(median: float, spread: float = 0.01) -> CandidateStats:
    """Statistics of the five samples ``median·(1 − spread, 1 − spread/2, 1, 1 + spread/2, 1 + spread)``."""
    return candidate_stats([median * (1 + spread * f) for f in (-1.0, -0.5, 0.0, 0.5, 1.0)])


def point_result(tokens: int, replicated: Sequence[float], split: Sequence[float], *, tp: int = 8,
                 max_abs_error: float = 0.002, **fields: Any) -> PointResult:
    """A measured point from the two candidates' samples (µs); M padded to a multiple of ``tp``.

    ``fields``: more ``PointResult`` fields (snake_case), e.g. ``shard_gemm_us``, ``gather_us``.
    """
    padded = -(-tokens // tp) * tp
    return PointResult(tokens=tokens, padded_tokens=padded, rows_per_rank=padded // tp,
                       replicated=candidate_stats([float(x) for x in replicated]),
                       split=candidate_stats([float(x) for x in split]),
                       gather_source=fields.pop("gather_source", "measured"), max_abs_error=max_abs_error, **fields)


def kernel_result(tokens: tuple[int, ...] = (6, 48, 384, 2048, 4096), tp: int = 8, complete: bool = True,
                  error: str | None = None, *, environment: Environment | None = None,
                  gather_us: float | None = None) -> KernelResult:
    """A result whose split loses below ~100 tokens and wins above (replicated 10 + 0.2·M µs, split 25 + 0.04·M).

    ``environment``: the run's fingerprint (default: 8× H200, CUDA). ``gather_us``: give every point the
    split's breakdown, a ``gather_us`` all-gather and a ``split − gather_us`` shard GEMM (default: none).
    """
    spec = ExperimentSpec.model_validate({"sweep": {"tokens": list(tokens)}, "parallelism": {"tensorParallelSize": tp}})
    points = []
    for t in tokens:
        split = 25 + t * 0.04
        breakdown = {} if gather_us is None else {"shard_gemm_us": split - gather_us, "gather_us": gather_us}
        points.append(point_result(t, [(10 + t * 0.2) * f for f in (0.99, 0.995, 1.0, 1.005, 1.01)],
                                   [split * f for f in (0.99, 0.995, 1.0, 1.005, 1.01)], tp=tp, max_abs_error=0.0,
                                   **breakdown))
    return KernelResult(
        spec=spec, environment=environment or Environment(gpu="NVIDIA H200", gpu_count=tp, device="cuda"),
        world_size=tp, gemm_backend="torch-fp8", gather_backend="nccl", gather_source="measured", timer="cupti",
        device="cuda", cuda_graphs=True, points=points, complete=complete, error=error,
    )
