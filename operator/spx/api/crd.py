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

from spx.api.combinations import cel_rules
from spx.api.crd_version import SCHEMA_VERSION, SCHEMA_VERSION_LABEL
from spx.api.k8s_patterns import LABEL_KEY
from spx.api.projection import WEIGHT_FORMAT_BLOCK, ProjectionSpec
from spx.api.serving import RESERVED_MOUNT_PATHS, ServingSpec, default_arms
from spx.api.spec import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION, ExperimentSpec
from spx.api.status import ExperimentStatus
from spx.vocabulary import RESERVED_SERVER_ENV

DEFAULT_TIMEOUT_SECONDS: int = ExperimentSpec.model_fields["timeout_seconds"].default
DEFAULT_STARTUP_TIMEOUT_SECONDS: int = ServingSpec.model_fields["startup_timeout_seconds"].default

#: Defaults the CEL rules fall back on: the CRD carries no defaults (the operator applies them through
#: the models), so a rule reads an optional field only behind ``has()`` and spells its default out.
_D_WEIGHT_FORMAT: str = ProjectionSpec.model_fields["weight_format"].default
_D_MOUNT: str = ServingSpec.model_fields["model_mount_path"].default
_RESERVED_ENV = RESERVED_SERVER_ENV


#: Cross-field rules (``x-kubernetes-validations``), keyed by the schema path they sit on (properties
#: separated by dots, ``[]`` for a list's items). Each mirrors a validator of spx.api (named in the
#: comment) so that the API server refuses what ``spx validate`` refuses; every optional field is read
#: behind ``has()``. ``isSorted()`` is the Kubernetes CEL list library's (Kubernetes ≥ 1.27).
CEL_RULES: dict[str, list[dict[str, str]]] = {
    "spec.projection": [
        # ProjectionSpec._block_aligned, one rule per block-scaled format; absent fields take the model's
        # defaults (V4.1's format, 5120 and [1280, 512], multiples of every block edge)
        {
            "rule": f"(has(self.weightFormat) ? self.weightFormat : '{_D_WEIGHT_FORMAT}') != '{fmt}' || "
            f"((!has(self.hiddenSize) || self.hiddenSize % {block} == 0) && "
            f"(!has(self.outputSizes) || self.outputSizes.all(n, n % {block} == 0)))",
            "message": f"with weightFormat {fmt}, hiddenSize and every outputSizes entry must be multiples of {block}",
        }
        for fmt, block in WEIGHT_FORMAT_BLOCK.items()
        if block is not None
    ],
    "spec": [
        {   # ExperimentSpec._vllm_benches_fit
            "rule": "!has(self.accuracy) || has(self.serving)",
            "message": "accuracy runs GSM8K on the servers of spec.serving's arms: set spec.serving too",
        },
        {   # ExperimentSpec._vllm_benches_fit, via min_timeout_seconds
            "rule": "!has(self.serving) || "
            f"(has(self.timeoutSeconds) ? self.timeoutSeconds : {DEFAULT_TIMEOUT_SECONDS}) >= "
            "(((has(self.serving.points) && size(self.serving.points) == 0 && !has(self.accuracy)) ? 0 : "
            f"(has(self.serving.arms) ? size(self.serving.arms) : {len(default_arms())})) + "
            "(has(self.serving.step) ? 1 : 0)) * "
            f"(has(self.serving.startupTimeoutSeconds) ? self.serving.startupTimeoutSeconds : "
            f"{DEFAULT_STARTUP_TIMEOUT_SECONDS}) + "
            "((has(self.serving.step) && has(self.serving.step.budgetSeconds)) ? self.serving.step.budgetSeconds : 0)",
            "message": "with spec.serving, timeoutSeconds must be at least (the number of serving arms that run: none "
            "with points: [] and no accuracy + the step "
            "A/B's one server) × serving.startupTimeoutSeconds + serving.step.budgetSeconds (every server's model "
            "load and the step A/B's rounds must fit the Job deadline)",
        },
        *cel_rules(ExperimentSpec),  # ExperimentSpec._runs_somewhere: spx.api.combinations, the same messages
    ],
    "spec.sweep": [
        {   # SweepSpec._sorted_positive_unique
            "rule": "!has(self.tokens) || self.tokens.all(t, self.tokens.exists_one(u, u == t))",
            "message": "sweep.tokens must not repeat a token count",
        },
        {
            "rule": "!has(self.tokens) || self.tokens.isSorted()",
            "message": "sweep.tokens must be in increasing order",
        },
    ],
    "spec.resources.nodeSelector": [
        {   # the key pattern of ResourcesSpec.node_selector (a schema cannot constrain map keys)
            "rule": f"self.all(k, size(k) <= 253 && k.matches(r'{LABEL_KEY}'))",
            "message": "resources.nodeSelector keys must be label keys: an optional DNS-subdomain prefix and '/', "
            "then a name of up to 63 alphanumerics, '-', '_' or '.'",
        }
    ],
    "spec.serving": [
        {   # ServingSpec._consistent
            "rule": "!has(self.points) || self.points.all(p, self.points.exists_one(q, q.name == p.name))",
            "message": "serving.points: point names must be unique",
        },
        {
            "rule": "!has(self.arms) || self.arms.all(a, self.arms.exists_one(b, b.name == a.name))",
            "message": "serving.arms: arm names must be unique",
        },
        {
            "rule": "!has(self.arms) || (self.arms.exists(a, a.variant == 'main') && "
            "self.arms.exists(a, a.variant == 'split'))",
            "message": "serving.arms needs at least one main and one split arm",
        },
        {
            "rule": "!has(self.modelPvc) || (has(self.modelPath) && (self.modelPath + '/').startsWith("
            f"(has(self.modelMountPath) ? self.modelMountPath : '{_D_MOUNT}') + "
            "((has(self.modelMountPath) ? self.modelMountPath : '').endsWith('/') ? '' : '/')))",
            "message": "serving.modelPvc is mounted at serving.modelMountPath: set serving.modelPath to the "
            "weights' directory under it",
        },
    ],
    "spec.serving.step": [
        {   # StepSpec._listed_once
            "rule": "!has(self.thresholds) || self.thresholds.all(t, self.thresholds.exists_one(u, u == t))",
            "message": "serving.step.thresholds must list each threshold once",
        }
    ],
    "spec.serving.modelMountPath": [
        {   # ServingSpec._mount_path_free
            "rule": "self != '/' && !" + repr(list(RESERVED_MOUNT_PATHS)).replace('"', "'")
            + ".exists(p, self == p || self.startsWith(p + '/'))",
            "message": "serving.modelMountPath must not be / nor lie under " + ", ".join(RESERVED_MOUNT_PATHS)
            + ", which the bench Job mounts itself (e.g. /models)",
        }
    ],
    "spec.serving.env": [
        {   # ServingSpec._no_reserved_env
            "rule": " && ".join(f"!('{k}' in self)" for k in _RESERVED_ENV),
            "message": f"{', '.join(_RESERVED_ENV)} are set per arm by spx; remove them from serving.env",
        }
    ],
    "spec.serving.arms[]": [
        {   # ServingArmSpec._main_has_no_threshold
            "rule": "self.variant != 'main' || !has(self.thresholdTokens)",
            "message": "a main arm runs with the split off; remove thresholdTokens (or make it variant: split)",
        }
    ],
}

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "GPU", "type": "string", "jsonPath": ".status.environment.gpu"},
    # whole tokens, rounded (KernelStatus.crossover_tokens_rounded): an "integer" column would truncate the float
    {"name": "Crossover", "type": "integer", "jsonPath": ".status.kernel.crossoverTokensRounded",
     "description": "Break-even token count, rounded to whole tokens"},
    {"name": "Threshold", "type": "integer", "jsonPath": ".status.kernel.recommendedThresholdTokens"},
    {"name": "Verdict", "type": "string", "jsonPath": ".status.verdict"},
    {"name": "Decided-By", "type": "string", "jsonPath": ".status.kernel.decidedBy",
     "description": "The measurement that decided the verdict (kernel, step, serving, accuracy, correctness, deployment, none)"},
    {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Decided")].reason',
     "description": "Why the experiment ended as it did (the Decided condition's reason)"},
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
    # map keys: apiextensions allows neither patternProperties nor propertyNames; the values' schema goes
    # to additionalProperties and the key pattern to a CEL rule (CEL_RULES)
    pattern_props = out.pop("patternProperties", None)
    out.pop("propertyNames", None)
    if pattern_props:
        if len(pattern_props) != 1:
            raise ValueError(f"cannot express {len(pattern_props)} key patterns structurally: {node}")
        out["additionalProperties"] = next(iter(pattern_props.values()))
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
            node = node["properties"][part.removesuffix("[]")]
            if part.endswith("[]"):
                node = node["items"]
        node["x-kubernetes-validations"] = rules


def _map_lists(status: dict[str, Any]) -> None:
    """``status.conditions`` is a map-list keyed by ``type`` (metav1.Condition's convention), so
    server-side apply and kstatus readers treat each condition as its own entry."""
    conditions = status["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]


#: ``kubectl explain shardedprojectionexperiment``'s top-level text (the CRD's root schema description).
DESCRIPTION = (
    "A ShardedProjectionExperiment measures on the cluster's GPUs whether vLLM should split DeepSeek-V4.1's "
    "fused_wqa_wkv projection by token across tensor-parallel ranks (each rank projects its token shard, then "
    "an all-gather rebuilds the output), and from how many tokens: the spx operator runs a benchmark Job, "
    "writes the crossover, the recommended _SHARD_FUSED_WQA_WKV_MIN_TOKENS and a verdict (Pass, Fail, "
    "Inconclusive) to status, and sets the Decided condition when it is done (kubectl wait "
    "--for=condition=Decided). spec says what to measure; status is written by the operator only."
)


def build_crd() -> dict[str, Any]:
    """The ``CustomResourceDefinition`` of ``ShardedProjectionExperiment`` as a manifest dict.

    Namespaced, one served+stored version ``v1alpha1``, status subresource, printer columns
    (Phase, GPU, Crossover, Threshold, Verdict, Decided-By, Reason, Age).
    """
    spec_schema = structural_schema(ExperimentSpec)
    status_schema = structural_schema(ExperimentStatus)
    # Conditions are a map-list keyed by type (metav1.Condition convention; server-side apply and
    # kstatus readers merge them by type).
    status_schema["properties"]["conditions"].update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
    # Defaulted so that every read returns a `status` (the API server applies a schema default when
    # reading from etcd): GitOps health expressions (Flux's CEL) fail to evaluate on a missing top-level
    # field, and a new experiment has none until the operator's first status write.
    status_schema["default"] = {}
    root: dict[str, Any] = {
        "type": "object",
        "description": DESCRIPTION,
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
    _map_lists(status_schema)
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
