"""The bench Job sized for the real model (issue #36 req 6) is accepted by a real API server: the model
cache volume of each type (emptyDir with sizeLimit and the matching ephemeral-storage request, an existing
PVC, a hostPath) passes the server's validation (`kubectl create --dry-run=server`). No kubelet runs here:
that the kubelet evicts an unsized pod first under DiskPressure, and keeps a sized one, is not exercised."""

from __future__ import annotations

import json

import pytest

from spx.api import validate_spec
from spx.controller.manifests import job as k8s
from spx.controller.manifests.model_cache import ModelCache
from spx_testing.chart_cluster import Cluster

SERVING = {"serving": {"model": "deepseek-ai/DeepSeek-V4.1"}, "timeoutSeconds": 14400}


@pytest.mark.parametrize("cache", [{}, {"type": "persistentVolumeClaim", "claimName": "hf-cache"},
                                   {"type": "hostPath", "path": "/mnt/nvme/hf"}], ids=["emptyDir", "pvc", "hostPath"])
def test_the_sized_bench_job_is_valid_for_the_api_server(cluster: Cluster, cache: dict[str, str]) -> None:
    cluster.kubectl("create", "namespace", "sizing", check=False)
    job = k8s.build_job("v41", "sizing", "uid-1", 1, validate_spec(SERVING), "registry.example/spx-bench:1",
                        k8s.BenchOptions(model_cache=ModelCache.model_validate(cache), memory="400Gi"))
    job["metadata"]["ownerReferences"] = []  # no experiment object behind it here
    out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(job)).stdout
    created = json.loads(out)["spec"]["template"]["spec"]
    container = created["containers"][0]
    assert container["resources"]["requests"]["memory"] == "400Gi"
    assert any(v["name"] == "model-cache" for v in created["volumes"])
    if not cache:
        assert container["resources"]["requests"]["ephemeral-storage"] == "800Gi"
