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


def _experiment(name: str, **spec: object) -> dict[str, object]:
    return {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
            "metadata": {"name": name, "namespace": "sizing"}, "spec": spec}


def test_a_gpu_that_cannot_hold_the_model_is_warned_about_at_create(cluster: Cluster, chart: object) -> None:
    """Issue #36: gpuProducts allowed H100-80GB with nothing saying whether the model fits. With the chart's
    admission policy a serving experiment listing a GPU whose memory × TP is below the weights (bench.gpuFit)
    is created with a Warning naming it; an H200-only one, a kernel-only one and one on CPU get none."""
    import time

    import yaml

    from spx_testing.chartlib import CHART, CRD_NAME, installable_crd

    cluster.kubectl("create", "namespace", "sizing", check=False)
    cluster.apply([installable_crd(yaml.safe_load((CHART / "crds" / "shardedprojectionexperiments.yaml").read_text()))],
                  server_side=True)
    cluster.wait_established(CRD_NAME)
    rendered = chart.render({"admissionPolicy": {"enabled": True}, "watch": {"namespaces": ["sizing"]}},  # type: ignore[attr-defined]
                            name="fit", namespace="fit-system", is_install=True)
    docs = [d for p, text in rendered.items() if p.endswith("gpu-fit-warning.yaml") for d in yaml.safe_load_all(text) if d]
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    cluster.apply(docs)
    serving = {"model": "deepseek-ai/DeepSeek-V4.1"}
    h100 = _experiment("on-h100", serving=serving, timeoutSeconds=14400,
                       resources={"gpuProducts": ["NVIDIA-H200", "NVIDIA-H100-80GB-HBM3"]})
    deadline = time.monotonic() + 90
    while "Warning:" not in (warned := cluster.kubectl("create", "--dry-run=server", "-f", "-",
                                                      stdin=yaml.safe_dump(h100))).stderr:
        assert time.monotonic() < deadline, f"the policy never took effect: {warned.stderr}"
        time.sleep(0.5)
    assert warned.returncode == 0  # a warning, not a refusal
    assert "spec.resources.gpuProducts lists NVIDIA-H100-80GB-HBM3, which cannot hold the model at TP 8" in warned.stderr
    assert "772 GB" in warned.stderr and "96 GB per GPU" in warned.stderr, warned.stderr
    for quiet in (_experiment("on-h200", serving=serving, timeoutSeconds=14400, resources={"gpuProducts": ["NVIDIA-H200"]}),
                  _experiment("kernel-only", resources={"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}),
                  _experiment("tp16", serving=serving, timeoutSeconds=14400, parallelism={"tensorParallelSize": 16},
                              resources={"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]})):
        proc = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(quiet))
        assert "cannot hold the model" not in proc.stderr, (quiet["metadata"], proc.stderr)
