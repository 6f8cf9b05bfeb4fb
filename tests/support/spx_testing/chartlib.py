"""Helpers of the chart tests: rendering through the real Helm engine, CRD-schema validation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "spx-operator"
VENDORED_CRDS = ROOT / "tests" / "data" / "crds"
RELEASE = "spx"
NAMESPACE = "spx-system"
#: Oldest Kubernetes the chart supports (Chart.yaml kubeVersion), the one objects are validated at.
KUBE_VERSION = "1.30.0"

#: Every optional feature on: what the "all features" renders use.
ALL_FEATURES: dict[str, Any] = {
    "watch": {"namespaces": ["ml-bench", "ml-staging"]},
    "serviceMonitor": {
        "enabled": True,
        "labels": {"release": "kube-prometheus-stack"},
        "metricRelabelings": [{"action": "drop", "regex": "spx_reconcile_created", "sourceLabels": ["__name__"]}],
    },
    "prometheusRule": {
        "enabled": True,
        "labels": {"release": "kube-prometheus-stack"},
        "alertLabels": {"team": "ml-infra"},
    },
    "dashboard": {"enabled": True, "namespace": "monitoring", "annotations": {"grafana_folder": "spx"}},
    "operator": {"extraEnv": [{"name": "SPX_RESYNC_SECONDS", "value": "300"}], "verbose": True, "logFormat": "plain"},
    "podAnnotations": {"example.com/owner": "ml-infra"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
    "priorityClassName": "system-cluster-critical",
    "imagePullSecrets": [{"name": "registry"}],
    "networkPolicy": {"enabled": True},
    "admissionPolicy": {"enabled": True},
}


def render_docs(chart: Any, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Render the chart as `helm install` would and return every Kubernetes object, templates first."""
    rendered = chart.render(copy.deepcopy(values or {}), name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for path in sorted(rendered):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(rendered[path]) if d)
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


# --------------------------------------------------------------------------- CRD schemas


def _strict(schema: Any) -> Any:
    """An openAPIV3Schema as JSON Schema that also rejects unknown fields.

    The API server prunes (or, with kubectl's default `--validate=strict`, rejects) fields a
    structural schema does not declare; forbidding them here catches typos in templates.
    """
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    # OpenAPI 3.0 spells exclusive bounds as booleans next to minimum/maximum; JSON Schema 7 as numbers.
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if out.get(exclusive) is True:
            out[exclusive] = out.pop(bound)
        elif out.get(exclusive) is False:
            del out[exclusive]
    if schema.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
        return out
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_validator(crd: dict[str, Any], version: str) -> Any:
    from jsonschema import Draft7Validator

    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return Draft7Validator(_strict(v["schema"]["openAPIV3Schema"]))
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")


def load_crd(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(docs) == 1 and docs[0]["kind"] == "CustomResourceDefinition"
    return docs[0]


def validate_against_crd(obj: dict[str, Any], crd: dict[str, Any]) -> list[str]:
    """Problems of ``obj`` against the CRD's schema for its apiVersion, as readable lines."""
    group, version = obj["apiVersion"].split("/")
    assert group == crd["spec"]["group"], (group, crd["spec"]["group"])
    assert obj["kind"] == crd["spec"]["names"]["kind"]
    validator = crd_validator(crd, version)
    return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(obj)]


# --------------------------------------------------------------------------- RBAC

#: What the operator's code calls (docs/install.md "Least privilege"): (API group, resource) → verbs,
#: in every watched namespace. Read off spx.controller (the client calls of reads.py and writes.py) and
#: kopf's watches (list, watch) and event posts (create).
EXPECTED_RULES: dict[tuple[str, str], set[str]] = {
    ("bench.spx.dev", "shardedprojectionexperiments"): {"get", "list", "watch"},
    ("bench.spx.dev", "shardedprojectionexperiments/status"): {"patch"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "delete"},
    ("", "configmaps"): {"create", "patch"},
    ("", "pods"): {"list", "watch"},
    ("", "pods/log"): {"get"},
    ("", "events"): {"create", "list"},
    ("kueue.x-k8s.io", "localqueues"): {"get"},
}
#: Cluster-wide, whatever the install mode: `get` on the operator's own CRD (the start-up check).
CRD_NAME = "shardedprojectionexperiments.bench.spx.dev"


def installable_crd(crd: dict[str, Any]) -> dict[str, Any]:
    """``crd`` with the JSON-Schema keywords a real API server refuses rewritten (a copy).

    The generated CRD (spx.api.crd, as of this commit) declares ``spec.resources.nodeSelector`` with
    ``propertyNames`` (unknown to apiextensions/v1: strict decoding refuses the CRD) and
    ``patternProperties`` ("Forbidden: patternProperties is not supported"), so neither `kubectl
    create` nor `apply` installs it. Until spx.api.crd emits ``additionalProperties`` (keys checked
    by CEL), the cluster tests install it with that rewrite; once the generator is fixed this is a
    no-op. Found by tests/chart/test_rbac_cluster.py's first run on a real API server.
    """
    out = copy.deepcopy(crd)

    def fix(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("propertyNames", None)
            pattern = node.pop("patternProperties", None)
            if pattern:
                (values,) = pattern.values()
                node["additionalProperties"] = values
                node.pop("x-kubernetes-preserve-unknown-fields", None)
            for v in node.values():
                fix(v)
        elif isinstance(node, list):
            for v in node:
                fix(v)

    fix(out)
    return out
