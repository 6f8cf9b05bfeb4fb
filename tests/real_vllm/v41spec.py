"""Experiment specs for the vLLM tests: DeepSeek-V4.1's ``fused_wqa_wkv`` (5120 → 1280 + 512)."""

from __future__ import annotations

from pydantic import ValidationError

from spx.api.spec import ExperimentSpec

V41_FORMAT = "mxfp8-block32-ue8m0"


def v41_spec(tensor_parallel_size: int = 1) -> ExperimentSpec:
    """The default spec with ``weightFormat: mxfp8-block32-ue8m0`` and the given TP size.

    Validated when ``spx.api.spec`` knows the format (issue 9, requirement 1); until then the field is
    set without validation so these tests exercise the backend either way.
    """
    try:
        return ExperimentSpec.model_validate(
            {"projection": {"weightFormat": V41_FORMAT}, "parallelism": {"tensorParallelSize": tensor_parallel_size}}
        )
    except ValidationError:
        spec = ExperimentSpec.model_validate({"parallelism": {"tensorParallelSize": tensor_parallel_size}})
        projection = spec.projection.model_copy(update={"weight_format": V41_FORMAT})
        return spec.model_copy(update={"projection": projection})
