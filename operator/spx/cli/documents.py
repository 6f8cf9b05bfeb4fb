"""The machine-readable documents of ``spx … -o json|yaml``: one model, one JSON schema each.

=============  ================================  ==========================================
command        document (``schemaVersion``)      schema
=============  ================================  ==========================================
``validate``   ``spx.dev/cli-validate/v1``       ``docs/schemas/validate.schema.json``
``report``     ``spx.dev/cli-report/v1``         ``docs/schemas/report.schema.json``
``predict``    ``spx.dev/cli-predict/v1``        ``docs/schemas/predict.schema.json``
``gate``       ``spx.dev/cli-gate/v1``           ``docs/schemas/gate.schema.json``
=============  ================================  ==========================================

The schemas are generated from these models (``python -m spx.cli.documents docs/schemas``) and a test
checks that the published files match and that each command's output validates against its schema.
Field names are camelCase; fields that are unset are left out. An input error (exit 3) is a document too:
``validate`` says ``valid: false``, ``report`` and ``predict`` list ``problems`` (and carry no verdict,
kernel or prediction), ``gate`` has ``exitCode`` 3 and a ``message``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from spx.analysis.predict import Prediction
from spx.api.accuracy import AccuracyStatus
from spx.api.base import CamelModel
from spx.api.serving import ServingStatus
from spx.api.spec import Experiment
from spx.api.status import DecidedReason, Environment, JudgementStatus, KernelStatus, Verdict
from spx.api.step import StepStatus
from spx.files import write_atomic
from spx.vocabulary import CPU_NOTE

#: The ``problems`` field of the report and predict documents (``valid: false`` and ``problems`` in validate's).
PROBLEMS = ("why there is no result (the command exits 3): one line per problem, as stderr says in text "
            "output; empty when there is one")


class ValidateDocument(CamelModel):
    """``spx validate FILE -o json``: whether the file is a valid experiment, and the experiment normalised."""

    schema_version: Literal["spx.dev/cli-validate/v1"] = "spx.dev/cli-validate/v1"
    source: str
    valid: bool
    problems: list[str] = Field(default_factory=list, description="one line per invalid field: path: what (got …)")
    experiment: Experiment | None = Field(default=None, description="the experiment with defaults filled in")


class ReportDocument(CamelModel):
    """``spx report DIR -o json``: the run re-analysed by :func:`spx.analysis.judge.judge`."""

    schema_version: Literal["spx.dev/cli-report/v1"] = "spx.dev/cli-report/v1"
    experiment: str | None = Field(default=None, description="the experiment's name; unset when there are problems")
    source: str
    problems: list[str] = Field(default_factory=list, description=PROBLEMS)
    partial: bool | None = Field(
        default=None, description="the run stopped before its sweep finished: no verdict is published (set when "
                                  "there are no problems)")
    verdict: Verdict | None = None
    measured_verdict: Verdict | None = Field(
        default=None, description="partial run: the verdict its measured points alone would get (not a decision)")
    decided_reason: DecidedReason | None = Field(default=None, description="set when there are no problems")
    reasons: list[str] = Field(default_factory=list)
    kernel: KernelStatus | None = None
    serving: ServingStatus | None = None
    accuracy: AccuracyStatus | None = None
    step: StepStatus | None = Field(default=None, description="the step A/B judged with the sweep (status.json's step)")
    judgement: JudgementStatus | None = Field(
        default=None, description="what decided, the recommended threshold, expected effect, bottom line and next step "
        "(as status.json's judgement)")
    judged_with: list[str] = Field(
        default_factory=list, description="the vLLM results judged with the kernel sweep, each with where it was read "
                                          "(so the verdict is the one spx gate reads from the same folder)")
    environment: Environment | None = None
    cpu: bool = Field(default=False, description=CPU_NOTE)
    warnings: list[str] = Field(default_factory=list)


class PredictDocument(CamelModel):
    """``spx predict -o json``: the H20 → H100/H200 what-if."""

    schema_version: Literal["spx.dev/cli-predict/v1"] = "spx.dev/cli-predict/v1"
    source: str
    problems: list[str] = Field(default_factory=list, description=PROBLEMS)
    prediction: Prediction | None = Field(default=None, description="set when there are no problems")
    alternative_interpolation: str | None = None
    alternative_break_even_tokens: float | None = None


class GateDocument(CamelModel):
    """``spx gate TARGET -o json``: the decision and the exit code it maps to (``spx.api.exit_codes``)."""

    schema_version: Literal["spx.dev/cli-gate/v1"] = "spx.dev/cli-gate/v1"
    exit_code: int = Field(description="0 Pass, 1 Fail, 2 Inconclusive/undecided, 3 usage, 4 unreachable")
    source: str
    decided: bool
    verdict: Verdict | None = None
    phase: str | None = None
    reason: str | None = None
    message: str = ""
    verdict_reasons: list[str] = Field(default_factory=list)


#: ``schema file name → model``, as published under ``docs/schemas/``.
DOCUMENTS: dict[str, type[BaseModel]] = {
    "validate.schema.json": ValidateDocument,
    "report.schema.json": ReportDocument,
    "predict.schema.json": PredictDocument,
    "gate.schema.json": GateDocument,
}


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of ``model``'s wire form (camelCase)."""
    schema = model.model_json_schema(by_alias=True, mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def schema_text(model: type[BaseModel]) -> str:
    """:func:`json_schema` as the published file's text."""
    return json.dumps(json_schema(model), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema of :data:`DOCUMENTS` into ``directory``; returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, model in DOCUMENTS.items():
        write_atomic(directory / name, schema_text(model))
        paths.append(directory / name)
    return paths


if __name__ == "__main__":
    for path in write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schemas")):
        print(path)
