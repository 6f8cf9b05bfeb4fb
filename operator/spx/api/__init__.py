"""spx.api — the resource's schema: spec, status, the bench's result document, CRD generation.

Pure: imports neither torch nor kopf nor kubernetes.
"""

from spx.api import wire
from spx.api.base import dump_model
from spx.api.conditions import (
    CONDITION_TYPES,
    DECIDED_REASONS,
    FAILURE_REASONS,
    VERDICT_REASONS,
    WAITING_REASONS,
    kstatus_conditions,
)
from spx.api.gate import GateSpec
from spx.api.gather_model import GatherModelSpec
from spx.api.kernel import KernelSpec
from spx.api.loading import (
    SpecError,
    describe_validation_error,
    load_experiment,
    parse_experiment,
    validate_spec,
)
from spx.api.projection import ProjectionSpec
from spx.api.result import (
    RESULT_SCHEMA_VERSION,
    SUMMARY_MAX_BYTES,
    CandidateStats,
    KernelResult,
    PointResult,
    ResultSummary,
)
from spx.api.spec import API_VERSION, GROUP, KIND, PLURAL, VERSION, Experiment, ExperimentSpec
from spx.api.status import Condition, Environment, ExperimentStatus, KernelPoint, KernelStatus

__all__ = [
    "CONDITION_TYPES", "DECIDED_REASONS", "FAILURE_REASONS", "VERDICT_REASONS", "WAITING_REASONS",
    "kstatus_conditions", "wire",
    "API_VERSION", "GROUP", "KIND", "PLURAL", "VERSION", "RESULT_SCHEMA_VERSION",
    "CandidateStats", "Condition", "Environment", "Experiment", "ExperimentSpec", "ExperimentStatus",
    "GateSpec", "GatherModelSpec", "KernelPoint", "KernelResult", "KernelSpec", "KernelStatus",
    "PointResult", "ProjectionSpec", "ResultSummary", "SUMMARY_MAX_BYTES", "SpecError",
    "describe_validation_error", "dump_model", "load_experiment", "parse_experiment", "validate_spec",
]
