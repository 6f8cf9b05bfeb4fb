"""Generate the CustomResourceDefinition from the pydantic models (``spx crd``).

The OpenAPI schema Kubernetes wants is *structural* (no ``$ref``, no ``anyOf`` of types, every
field typed), so pydantic's JSON Schema is rewritten: ``$ref`` inlined, titles and defaults dropped
(the operator applies defaults through the models), ``Optional[X]`` → ``X`` + ``nullable: true``,
``exclusiveMinimum: n`` → ``minimum: n, exclusiveMinimum: true`` (OpenAPI 3.0), free-form maps →
``x-kubernetes-preserve-unknown-fields``. Cross-field rules a schema cannot say are CEL rules kept
to core CEL (``x-kubernetes-validations``); the operator re-checks everything on admission.
Known pitfall (kopf #574): a status field missing from the schema is silently pruned, so status is
declared in full.
"""

from __future__ import annotations

import copy
from typing import Any

from spx.api.crd_version import SCHEMA_VERSION, SCHEMA_VERSION_LABEL
from spx.api.serving import ServingSpec, default_arms
from spx.api.spec import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    V41_WEIGHT_FORMAT,
    VERSION,
    WEIGHT_FORMAT_BLOCK,
    ExperimentSpec,
)
from spx.api.status import ExperimentStatus

DEFAULT_TIMEOUT_SECONDS: int = ExperimentSpec.model_fields["timeout_seconds"].default
DEFAULT_STARTUP_TIMEOUT_SECONDS: int = ServingSpec.model_fields["startup_timeout_seconds"].default

#: Core-CEL cross-field rules, keyed by the schema path (dot-separated properties) they sit on.
CEL_RULES: dict[str, list[dict[str, str]]] = {
    "spec.projection": [
        # ProjectionSpec._block_aligned, one rule per block-scaled format; absent fields take the model's
        # defaults (V4.1's format, 5120 and [1280, 512], multiples of every block edge)
        {
            "rule": f"(has(self.weightFormat) ? self.weightFormat : '{V41_WEIGHT_FORMAT}') != '{fmt}' || "
            f"((!has(self.hiddenSize) || self.hiddenSize % {block} == 0) && "
            f"(!has(self.outputSizes) || self.outputSizes.all(n, n % {block} == 0)))",
            "message": f"with weightFormat {fmt}, hiddenSize and every outputSizes entry must be multiples of {block}",
        }
        for fmt, block in WEIGHT_FORMAT_BLOCK.items()
        if block is not None
    ],
    "spec": [
        {
            "rule": "!has(self.accuracy) || has(self.serving)",
            "message": "accuracy runs GSM8K on the servers of spec.serving's arms: set spec.serving too",
        },
        {
            # ExperimentSpec._vllm_benches_fit; the CRD carries no defaults, so they are spelled out
            "rule": "!has(self.serving) || "
            f"(has(self.timeoutSeconds) ? self.timeoutSeconds : {DEFAULT_TIMEOUT_SECONDS}) >= "
            f"(has(self.serving.arms) ? size(self.serving.arms) : {len(default_arms())}) * "
            f"(has(self.serving.startupTimeoutSeconds) ? self.serving.startupTimeoutSeconds : "
            f"{DEFAULT_STARTUP_TIMEOUT_SECONDS})",
            "message": "with spec.serving, timeoutSeconds must be at least the number of serving arms × "
            "serving.startupTimeoutSeconds (every arm's model load must fit the Job deadline)",
        },
    ],
    "spec.sweep": [
        {
            "rule": "self.tokens.all(t, self.tokens.exists_one(u, u == t))",
            "message": "sweep.tokens must not repeat a token count",
        }
    ],
}

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "GPU", "type": "string", "jsonPath": ".status.environment.gpu"},
    {"name": "Crossover", "type": "number", "jsonPath": ".status.kernel.crossoverTokens"},
    {"name": "Threshold", "type": "integer", "jsonPath": ".status.kernel.recommendedThresholdTokens"},
    {"name": "Verdict", "type": "string", "jsonPath": ".status.verdict"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

_DROP = {"title", "default", "$defs", "examples"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        variants = [v for v in node["anyOf"] if v.get("type") != "null"]
        nullable = len(variants) < len(node["anyOf"])
        if len(variants) != 1:
            raise ValueError(f"cannot express a union of {len(variants)} types structurally: {node}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        flat: dict[str, Any] = _structural({**variants[0], **rest}, defs)
        if nullable:
            flat["nullable"] = True
        return flat
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
            continue
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
            continue
        if key == "description":
            out[key] = value.split("\n\n")[0].replace("``", "").replace("\n", " ")
            continue
        out[key] = _structural(value, defs)
    if "properties" in out and out.get("additionalProperties") is False:
        del out["additionalProperties"]  # not allowed beside properties in a structural schema
    if out.get("type") == "object" and out.get("additionalProperties") is True:
        del out["additionalProperties"]
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "enum" in out and "type" not in out:
        sample = out["enum"][0]
        out["type"] = {str: "string", bool: "boolean", int: "integer", float: "number"}[type(sample)]
    return out


def structural_schema(model: type[Any]) -> dict[str, Any]:
    """OpenAPI v3 structural schema of a pydantic model, in its camelCase (alias) spelling."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _structural(raw, raw.get("$defs", {}))
    if not isinstance(schema, dict):
        raise TypeError("schema root must be an object")
    return schema


def _attach_cel(schema: dict[str, Any]) -> None:
    for path, rules in CEL_RULES.items():
        node = schema
        for part in path.split("."):
            node = node["properties"][part]
        node["x-kubernetes-validations"] = rules


def build_crd() -> dict[str, Any]:
    """The ``CustomResourceDefinition`` of ``ShardedProjectionExperiment`` as a manifest dict.

    Namespaced, one served+stored version ``v1alpha1``, status subresource, printer columns
    (Phase, GPU, Crossover, Threshold, Verdict, Age).
    """
    spec_schema = structural_schema(ExperimentSpec)
    status_schema = structural_schema(ExperimentStatus)
    # Conditions are a map-list keyed by type (metav1.Condition convention; server-side apply and
    # kstatus readers merge them by type).
    status_schema["properties"]["conditions"].update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
    root: dict[str, Any] = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    _attach_cel(root)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}",
                     "labels": {"app.kubernetes.io/part-of": "spx", SCHEMA_VERSION_LABEL: str(SCHEMA_VERSION)}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "listKind": f"{KIND}List",
                "categories": ["spx"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def crd_yaml() -> str:
    """``build_crd()`` as YAML, the exact text checked in under ``crds/``."""
    import yaml

    header = "# Generated by `spx crd` from spx.api; do not edit by hand.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100)
