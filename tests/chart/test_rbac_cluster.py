"""The chart's RBAC on a real API server (RBAC authorizer on): the operator's service account can do
exactly what the code needs, in the watched namespaces only, and is refused one step beyond.

The chart is rendered for a namespaced install (the default; watch.namespaces = [team-a]) and for
watch.allNamespaces; its ServiceAccount, Roles and bindings are applied as they are; every verb ×
resource of interest is asked of the authorizer (SubjectAccessReview, what `kubectl auth can-i --as`
does), and a few real requests are made with the service account's own token (TokenRequest API).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from spx_testing.chart_cluster import Cluster
from spx_testing.chartlib import CHART, CRD_NAME, EXPECTED_RULES, installable_crd

RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
#: Resources the operator uses, and a few it must never touch (secrets, exec, RBAC itself, leases).
RESOURCES = sorted(EXPECTED_RULES) + [
    ("", "secrets"), ("", "serviceaccounts"), ("", "serviceaccounts/token"), ("", "pods/exec"),
    ("", "pods/status"), ("batch", "jobs/status"), ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "rolebindings"), ("coordination.k8s.io", "leases"), ("apps", "deployments"),
]
RELEASE_NS = "spx-system"
#: Leader election, in the release namespace only: `create` of a Lease (get/update are granted on the
#: one Lease by name, so these name-less reviews of get/update are refused; see the test below).
LEADER_ELECTION = {("coordination.k8s.io", "leases", "create")}


def _review(cluster: Cluster, user: str, attrs: list[dict[str, str]]) -> list[bool]:
    """SubjectAccessReview answers for ``user`` (a service account), one per attribute set."""
    sa_ns = user.split(":")[2]
    reviews = [{
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}",
                                          "system:authenticated"], "resourceAttributes": a},
    } for a in attrs]
    out = cluster.kubectl("create", "-f", "-", "-o", "json", stdin=yaml.safe_dump_all(reviews)).stdout
    decoder, items, pos = json.JSONDecoder(), [], 0
    while out[pos:].strip():  # kubectl prints one JSON object per created review
        doc, end = decoder.raw_decode(out, pos + (len(out[pos:]) - len(out[pos:].lstrip())))
        items.extend(doc["items"] if doc.get("kind") == "List" else [doc])
        pos = end
    assert len(items) == len(attrs)
    return [bool(i["status"].get("allowed")) for i in items]


def _attrs(namespace: str | None, group: str, resource: str, verb: str, name: str | None = None) -> dict[str, str]:
    res, _, sub = resource.partition("/")
    a = {"verb": verb, "group": group, "resource": res}
    if sub:
        a["subresource"] = sub
    if namespace:
        a["namespace"] = namespace
    if name:
        a["name"] = name
    return a


def _install(cluster: Cluster, chart: Any, release: str, values: dict[str, Any]) -> str:
    docs = chart.render(values, name=release, namespace=RELEASE_NS, is_install=True)
    objs = [d for path in sorted(docs) if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(docs[path]) if d and d["kind"] in RBAC_KINDS]
    cluster.apply(objs)
    (sa,) = [d for d in objs if d["kind"] == "ServiceAccount"]
    return f"system:serviceaccount:{RELEASE_NS}:{sa['metadata']['name']}"


@pytest.fixture(scope="module")
def namespaced(cluster: Cluster, chart: Any) -> str:
    for ns in (RELEASE_NS, "team-a", "team-b", "kube-system"):
        cluster.kubectl("create", "namespace", ns, check=False)
    crd = installable_crd(yaml.safe_load((CHART / "crds" / "shardedprojectionexperiments.yaml").read_text()))
    cluster.apply([crd], server_side=True)
    cluster.wait_established(CRD_NAME)
    return _install(cluster, chart, "ns", {"watch": {"namespaces": ["team-a"]}})


def test_namespaced_install_grants_exactly_the_code_s_calls_in_the_watched_namespace(
        cluster: Cluster, namespaced: str) -> None:
    cases = [(ns, group, resource, verb) for ns in ("team-a", "team-b", RELEASE_NS, "kube-system")
             for group, resource in RESOURCES for verb in VERBS]
    answers = _review(cluster, namespaced, [_attrs(*c) for c in cases])
    wrong = []
    for (ns, group, resource, verb), allowed in zip(cases, answers, strict=True):
        expected = (ns == "team-a" and verb in EXPECTED_RULES.get((group, resource), set())) or (
            ns == RELEASE_NS and (group, resource, verb) in LEADER_ELECTION)
        if allowed != expected:
            wrong.append(f"{verb} {group or 'core'}/{resource} in {ns}: {'allowed' if allowed else 'refused'}")
    assert not wrong, "\n".join(wrong)


def test_namespaced_install_reads_only_its_own_crd_cluster_wide(cluster: Cluster, namespaced: str) -> None:
    crds = ("apiextensions.k8s.io", "customresourcedefinitions")
    cases = [
        (_attrs(None, *crds, "get", CRD_NAME), True),
        (_attrs(None, *crds, "get", "prometheusrules.monitoring.coreos.com"), False),
        (_attrs(None, *crds, "list"), False),
        (_attrs(None, *crds, "update", CRD_NAME), False),
        (_attrs(None, *crds, "patch", CRD_NAME), False),
        (_attrs(None, "", "namespaces", "list"), False),
        (_attrs(None, "", "nodes", "get", "gpu-0"), False),
        # cluster-wide versions of the namespaced rules (kopf -A would need these)
        (_attrs(None, "bench.spx.dev", "shardedprojectionexperiments", "list"), False),
        (_attrs(None, "", "pods", "list"), False),
    ]
    answers = _review(cluster, namespaced, [a for a, _ in cases])
    assert answers == [e for _, e in cases], list(zip([a for a, _ in cases], answers, strict=True))


def test_the_service_account_s_own_token_is_refused_one_step_beyond(cluster: Cluster, namespaced: str) -> None:
    """Real requests with the service account's token (TokenRequest API), not only the authorizer's view."""
    sa = namespaced.rsplit(":", 1)[1]
    token = cluster.sa_token(RELEASE_NS, sa)

    def can(*args: str) -> tuple[bool, str]:
        proc = cluster.kubectl(*args, token=token, check=False)
        return proc.returncode == 0, proc.stderr

    assert can("get", "shardedprojectionexperiments", "-n", "team-a")[0]
    assert can("get", "jobs", "-n", "team-a")[0]
    assert can("get", f"crd/{CRD_NAME}")[0]
    for args in (("get", "shardedprojectionexperiments", "-n", "team-b"),
                 ("get", "secrets", "-n", "team-a"),
                 ("get", "configmaps", "-n", "team-a"),
                 ("get", "pods", "-A"),
                 ("get", "pods", "-n", "kube-system"),
                 ("get", "crd")):
        ok, err = can(*args)
        assert not ok and "Forbidden" in err, (args, err)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "spx-result-probe", "namespace": "team-a"},
          "data": {"a": "1"}}
    assert cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(cm), token=token, check=False).returncode == 0
    cm["metadata"]["namespace"] = "team-b"
    proc = cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(cm), token=token, check=False)
    assert proc.returncode != 0 and "Forbidden" in proc.stderr, proc.stderr


def test_all_namespaces_install_is_cluster_wide_but_never_secrets_or_rbac(cluster: Cluster, chart: Any) -> None:
    user = _install(cluster, chart, "cw", {"watch": {"allNamespaces": True}})
    cases = [(ns, g, r, v) for ns in ("team-b", "kube-system") for g, r in RESOURCES for v in VERBS]
    answers = _review(cluster, user, [_attrs(*c) for c in cases])
    wrong = [f"{v} {g or 'core'}/{r} in {ns}: {'allowed' if a else 'refused'}"
             for (ns, g, r, v), a in zip(cases, answers, strict=True)
             if a != (v in EXPECTED_RULES.get((g, r), set()))]
    assert not wrong, "\n".join(wrong)


def test_leader_election_reaches_only_its_own_lease(cluster: Cluster, namespaced: str) -> None:
    lease = ("coordination.k8s.io", "leases")
    cases = [
        (_attrs(RELEASE_NS, *lease, "get", "ns-spx-operator-leader"), True),
        (_attrs(RELEASE_NS, *lease, "update", "ns-spx-operator-leader"), True),
        (_attrs(RELEASE_NS, *lease, "create"), True),
        (_attrs(RELEASE_NS, *lease, "get", "kube-scheduler"), False),
        (_attrs(RELEASE_NS, *lease, "update", "kube-controller-manager"), False),
        (_attrs(RELEASE_NS, *lease, "delete", "ns-spx-operator-leader"), False),
        (_attrs(RELEASE_NS, *lease, "list"), False),
        (_attrs("kube-system", *lease, "get", "ns-spx-operator-leader"), False),
        (_attrs("team-a", *lease, "create"), False),
    ]
    answers = _review(cluster, namespaced, [a for a, _ in cases])
    assert answers == [e for _, e in cases], list(zip([a for a, _ in cases], answers, strict=True))
