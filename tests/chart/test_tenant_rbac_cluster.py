"""The chart's tenant roles on a real API server: ClusterRoles aggregated into Kubernetes' view / edit /
admin (by the real clusterrole-aggregation controller of kube-controller-manager) let namespace users
read or manage experiments, and never grant the ``/status`` subresource, so only the operator writes
a verdict. Asked of the authorizer (SubjectAccessReview) and tried with real requests (``kubectl --as``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from spx_testing.chart_cluster import Cluster
from spx_testing.chartlib import CHART, CRD_NAME, installable_crd

NS, OTHER = "tenant-a", "tenant-b"
USERS = {"vic": "view", "eve": "edit", "ada": "admin"}
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
READ = {"get", "list", "watch"}
#: What each built-in role may do with experiments once the chart's roles are aggregated into it.
EXPECTED = {"view": READ, "edit": set(VERBS), "admin": set(VERBS)}


def _review(cluster: Cluster, user: str, attrs: list[dict[str, str]]) -> list[bool]:
    reviews = [{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": ["system:authenticated"], "resourceAttributes": a}} for a in attrs]
    out = cluster.kubectl("create", "-f", "-", "-o", "json", stdin=yaml.safe_dump_all(reviews)).stdout
    decoder, items, pos = json.JSONDecoder(), [], 0
    while out[pos:].strip():
        doc, end = decoder.raw_decode(out, pos + (len(out[pos:]) - len(out[pos:].lstrip())))
        items.extend(doc["items"] if doc.get("kind") == "List" else [doc])
        pos = end
    assert len(items) == len(attrs)
    return [bool(i["status"].get("allowed")) for i in items]


def _attrs(ns: str, verb: str, sub: str = "") -> dict[str, str]:
    a = {"verb": verb, "group": "bench.spx.dev", "resource": "shardedprojectionexperiments", "namespace": ns}
    if sub:
        a["subresource"] = sub
    return a


@pytest.fixture(scope="module")
def tenants(cluster: Cluster, chart: Any) -> Cluster:
    for ns in (NS, OTHER, "spx-system"):
        cluster.kubectl("create", "namespace", ns, check=False)
    crd = installable_crd(yaml.safe_load((CHART / "crds" / "shardedprojectionexperiments.yaml").read_text()))
    cluster.apply([crd], server_side=True)
    cluster.wait_established(CRD_NAME)
    docs = chart.render({}, name="tn", namespace="spx-system", is_install=True)
    roles = [d for path in sorted(docs) if path.endswith("tenant-rbac.yaml")
             for d in yaml.safe_load_all(docs[path]) if d]
    assert [r["metadata"]["name"] for r in roles] == ["tn-spx-operator-experiments-view", "tn-spx-operator-experiments-edit"]
    cluster.apply(roles)
    bindings = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": f"{user}-{role}", "namespace": NS},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
                for user, role in USERS.items()]
    cluster.apply(bindings)
    # the aggregation controller copies the rules into view/edit/admin asynchronously: wait for it
    deadline = time.monotonic() + 120
    while not all(_review(cluster, u, [_attrs(NS, "get")])[0] for u in USERS):
        assert time.monotonic() < deadline, "the chart's roles were never aggregated into view/edit/admin"
        time.sleep(0.5)
    return cluster


def test_view_edit_admin_get_what_their_role_says_and_never_status(tenants: Cluster) -> None:
    cases = [(user, ns, verb, sub) for user in USERS for ns in (NS, OTHER) for verb in VERBS for sub in ("", "status")]
    wrong = []
    for user in USERS:
        mine = [c for c in cases if c[0] == user]
        got = _review(tenants, user, [_attrs(ns, verb, sub) for _, ns, verb, sub in mine])
        for (_, ns, verb, sub), allowed in zip(mine, got, strict=True):
            expected = ns == NS and not sub and verb in EXPECTED[USERS[user]]
            if allowed != expected:
                wrong.append(f"{user} ({USERS[user]}) {verb} experiments{'/' + sub if sub else ''} in {ns}: "
                             f"{'allowed' if allowed else 'refused'}")
    assert not wrong, "\n".join(wrong)


def test_an_editor_creates_an_experiment_but_cannot_write_its_verdict(tenants: Cluster) -> None:
    exp = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
           "metadata": {"name": "tenant-run", "namespace": NS}, "spec": {"kernel": {"device": "cpu"}}}
    tenants.kubectl("create", "-f", "-", "--as=eve", stdin=yaml.safe_dump(exp))
    assert tenants.kubectl("get", "spx", "tenant-run", "-n", NS, "--as=vic", check=False).returncode == 0
    proc = tenants.kubectl("patch", "spx", "tenant-run", "-n", NS, "--as=eve", "--subresource=status", "--type=merge",
                           "-p", '{"status": {"phase": "Succeeded"}}', check=False)
    assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), proc.stderr
    # a status in a main-resource patch is dropped by the API server (status subresource)
    tenants.kubectl("patch", "spx", "tenant-run", "-n", NS, "--as=eve", "--type=merge",
                    "-p", '{"status": {"phase": "Succeeded"}}')
    assert (tenants.get_json("spx", "tenant-run", "-n", NS).get("status") or {}).get("phase") != "Succeeded"
    proc = tenants.kubectl("delete", "spx", "tenant-run", "-n", NS, "--as=vic", check=False)
    assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), proc.stderr
    tenants.kubectl("delete", "spx", "tenant-run", "-n", NS, "--as=eve")
