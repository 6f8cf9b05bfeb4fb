"""The operator refuses field combinations no machine can run before any Job exists, with the messages
``spx validate`` and the CRD's CEL rules give (:mod:`spx.api.combinations`)."""

from __future__ import annotations

from spx.api.loading import SpecError, validate_spec
from spx.controller.decide.conclusion import conclude

from .world import observed

CPU_GPU_ONLY = {"parallelism": {"tensorParallelSize": 2},
                "kernel": {"device": "cpu", "timer": "cupti", "gather": "nccl", "gemmBackend": "torch-fp8"}}


def test_the_operator_refuses_before_a_job_with_the_same_messages() -> None:
    """The reactor validates with :func:`validate_spec`; ``conclude`` turns the error into InvalidSpec
    and creates no Job."""
    error: SpecError | None = None
    try:
        validate_spec(CPU_GPU_ONLY)
    except SpecError as err:
        error = err
    assert error is not None and len(error.problems) == 4
    decision = conclude(observed(spec=error))
    assert decision.outcome == "invalid" and decision.status is not None
    assert decision.status.phase == "Failed"
    for problem in error.problems:
        assert problem in (decision.status.message or "")
    assert not any(type(a).__name__ == "CreateJob" for a in (*decision.before, *decision.after))
