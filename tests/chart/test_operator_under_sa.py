"""The real operator, under the chart's service account and nothing else, on a real API server.

`spx operator` runs with the rendered Deployment's arguments and environment, logged in with a
TokenRequest token of the chart's ServiceAccount (namespaced install, watch.namespaces = [sa-team]).
It must reconcile an experiment in its namespace — watch it, create its bench Job, patch its status
— without one refused request, and leave an experiment in another namespace alone. (No kubelet and
no Job controller here: the run stops at the Job; the whole run is tests/integration's business.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from spx_testing.chart_cluster import Cluster, run_operator
from spx_testing.chartlib import CHART, CRD_NAME, ROOT, installable_crd

RELEASE_NS, WATCHED, OTHER = "spx-system", "sa-team", "sa-other"


def test_the_operator_works_with_exactly_the_charts_rights(cluster: Cluster, chart: Any, tmp_path: Path) -> None:
    for ns in (RELEASE_NS, WATCHED, OTHER):
        cluster.kubectl("create", "namespace", ns, check=False)
    cluster.apply([installable_crd(yaml.safe_load((CHART / "crds" / "shardedprojectionexperiments.yaml").read_text()))],
                  server_side=True)
    cluster.wait_established(CRD_NAME)
    rendered = chart.render({"watch": {"namespaces": [WATCHED]}}, name="sa", namespace=RELEASE_NS, is_install=True)
    docs = [d for p in sorted(rendered) if not p.endswith("NOTES.txt") for d in yaml.safe_load_all(rendered[p]) if d]
    cluster.apply([d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                                    "ClusterRoleBinding")])
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    token = cluster.sa_token(RELEASE_NS, deployment["spec"]["template"]["spec"]["serviceAccountName"])
    with run_operator(cluster, deployment, token, tmp_path) as operator:
        quickstart = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
        for ns in (WATCHED, OTHER):
            exp = {**quickstart, "metadata": {"name": "sa-probe", "namespace": ns}}
            cluster.apply([exp])

        def reconciled() -> Any:
            obj = cluster.get_json("spx", "sa-probe", "-n", WATCHED)
            return obj if (obj.get("status") or {}).get("jobName") else None

        obj = operator.wait("the operator to create the bench Job and write the status", reconciled, 120)
        assert obj["status"]["phase"] in ("Pending", "Running"), obj["status"]
        job = cluster.get_json("job", obj["status"]["jobName"], "-n", WATCHED)
        assert job["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
        assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
        time.sleep(2)  # a moment for anything the operator might (wrongly) do in the other namespace
        # (the CRD defaults status to {}: an unreconciled experiment reads back with an empty one)
        assert not cluster.get_json("spx", "sa-probe", "-n", OTHER).get("status"), "reconciled an unwatched namespace"
        assert cluster.get_json("jobs", "-n", OTHER)["items"] == []
        assert not operator.refusals(), operator.refusals()[:5]
