"""Load experiment files and turn pydantic errors into messages a user can act on."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from spx.api.base import dump_model as dump_model  # re-exported: the one implementation is in base
from spx.api.spec import (
    API_VERSION,
    DNS_SUBDOMAIN,
    KIND,
    LABEL_KEY,
    LABEL_VALUE,
    QUANTITY,
    Experiment,
    ExperimentSpec,
)

#: What each pattern of the models means, for error messages.
PATTERN_HELP = {
    LABEL_VALUE: "a Kubernetes label value: at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric "
    "(e.g. NVIDIA-H200)",
    LABEL_KEY: "a Kubernetes label key: [DNS-subdomain prefix/]name, e.g. nvidia.com/gpu.product",
    DNS_SUBDOMAIN: "a DNS-1123 subdomain: lower-case a-z 0-9 - . starting and ending alphanumeric",
    QUANTITY: "a Kubernetes quantity such as 32, 500m or 192Gi",
}


class SpecError(ValueError):
    """An experiment failed validation.

    ``problems`` holds one line per invalid field: ``<path>: <what is wrong> (got <value>)``, the
    path in the camelCase spelling of the YAML (``spec.sweep.tokens[2]``).
    """

    def __init__(self, problems: list[str], source: str = "experiment") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"invalid {source}:\n" + "\n".join(f"  - {p}" for p in problems))


def _loc_to_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith("function-") or part in {"literal", "str", "int"}:
            continue
        else:
            path += f".{part}" if path else part
    return path or "(top level)"


def describe_validation_error(err: ValidationError, prefix: str = "") -> list[str]:
    """One readable line per pydantic error: field path (camelCase), what is wrong, the bad value."""
    lines = []
    for e in err.errors(include_url=False):
        path = _loc_to_path(prefix, tuple(e["loc"]))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling (fields are camelCase)"
        elif e["type"] == "string_pattern_mismatch":
            msg = "must be " + PATTERN_HELP.get(str(e.get("ctx", {}).get("pattern")), f"of the form {e.get('ctx', {}).get('pattern')}")
        elif e["type"] in ("int_type", "int_from_float", "int_parsing"):
            msg = "must be a whole number (an integer count, e.g. 2048)"
        elif e["type"] == "literal_error":
            msg = msg.replace("Input should be", "must be one of:")
        value = e.get("input")
        shown = repr(value) if not isinstance(value, dict) or len(repr(value)) < 120 else "{...}"
        lines.append(f"{path}: {msg} (got {shown})")
    return lines


def validate_spec(raw: dict[str, Any] | None, source: str = "experiment") -> ExperimentSpec:
    """Validate a ``spec`` mapping as the operator receives it.

    Raises:
        SpecError: with one line per invalid field, paths prefixed ``spec.``.
    """
    try:
        return ExperimentSpec.model_validate(raw or {}, by_alias=True, by_name=False)
    except ValidationError as err:
        raise SpecError(describe_validation_error(err, "spec"), source) from None


def parse_experiment(doc: Any, source: str = "experiment") -> Experiment:
    """Validate a whole object (``apiVersion``, ``kind``, ``metadata``, ``spec``).

    Raises:
        SpecError: when it is not a ShardedProjectionExperiment or a field is invalid.
    """
    if not isinstance(doc, dict):
        raise SpecError([f"(top level): expected a mapping with apiVersion/kind/metadata/spec (got {type(doc).__name__})"], source)
    if doc.get("kind") not in (None, KIND) or doc.get("apiVersion") not in (None, API_VERSION):
        raise SpecError(
            [f"kind/apiVersion: expected kind {KIND} and apiVersion {API_VERSION} "
             f"(got {doc.get('kind')!r} / {doc.get('apiVersion')!r})"],
            source,
        )
    try:
        return Experiment.model_validate(doc, by_alias=True, by_name=False)
    except ValidationError as err:
        raise SpecError(describe_validation_error(err), source) from None


def load_experiment(text: str, source: str = "experiment") -> Experiment:
    """Parse YAML text of one experiment, the file a user would ``kubectl apply``.

    Raises:
        SpecError: on YAML syntax errors, several documents, or invalid fields.
    """
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise SpecError([f"(YAML): {err}"], source) from None
    if len(docs) != 1:
        raise SpecError([f"(file): expected exactly one YAML document, found {len(docs)}"], source)
    return parse_experiment(docs[0], source)

