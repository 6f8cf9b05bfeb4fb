"""`helm install` with a real Helm binary (v4, ``scripts/get-helm.sh``) into the real control plane: the
optional monitoring objects fail the install with a message that says what to do when prometheus-
operator's CRDs are absent, and install once they are there (vendored: tests/data/crds)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from spx_testing.chart_cluster import Cluster
from spx_testing.chartlib import CHART, ROOT

CRDS = ROOT / "tests" / "data" / "crds"
NS = "monitoring-check"


def _helm() -> str:
    found = os.environ.get("SPX_HELM") or shutil.which("helm") or str(ROOT / ".venv" / "bin" / "helm")
    if not Path(found).is_file():
        pytest.skip("no helm binary: run scripts/get-helm.sh (or set SPX_HELM)")
    return found


def _install(cluster: Cluster, release: str, *sets: str) -> subprocess.CompletedProcess[str]:
    args = [_helm(), "install", release, str(CHART), "-n", NS, "--kubeconfig", cluster.kubeconfig,
            "--set", "watch.namespaces[0]=" + NS, *[x for s in sets for x in ("--set", s)]]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def test_monitoring_objects_need_their_crds_and_say_so(cluster: Cluster) -> None:
    cluster.kubectl("create", "namespace", NS, check=False)
    for crd in ("monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"):
        name = next(d for d in yaml.safe_load_all((CRDS / crd).read_text()) if d)["metadata"]["name"]
        cluster.kubectl("delete", "crd", name, "--ignore-not-found")

    proc = _install(cluster, "mon-a", "serviceMonitor.enabled=true")
    assert proc.returncode != 0
    assert ("serviceMonitor.enabled is true but this cluster does not serve monitoring.coreos.com/v1/ServiceMonitor"
            in proc.stderr), proc.stderr
    proc = _install(cluster, "mon-b", "prometheusRule.enabled=true")
    assert proc.returncode != 0 and "prometheusRule.enabled=false" in proc.stderr, proc.stderr

    for crd in ("monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"):
        cluster.apply([d for d in yaml.safe_load_all((CRDS / crd).read_text()) if d], server_side=True)
        name = next(d for d in yaml.safe_load_all((CRDS / crd).read_text()) if d)["metadata"]["name"]
        cluster.wait_established(name)
    proc = _install(cluster, "mon-c", "serviceMonitor.enabled=true", "prometheusRule.enabled=true")
    assert proc.returncode == 0, proc.stderr
    assert cluster.get_json("servicemonitor", "mon-c-spx-operator", "-n", NS)["spec"]["endpoints"]
    assert cluster.get_json("prometheusrule", "mon-c-spx-operator", "-n", NS)["spec"]["groups"]
