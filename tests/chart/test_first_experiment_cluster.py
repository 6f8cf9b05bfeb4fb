"""A platform team's first day with the chart's defaults, on a real API server (``KUBEBUILDER_ASSETS``):

- the flagship example (``examples/deepseek-v41-tp8.yaml``, what NOTES recommends) passes the default
  policy twice — the operator's own (``spx.api.policy.check_policy`` with the rendered ``SPX_POLICY``) and
  the chart's ValidatingAdmissionPolicy at ``kubectl create`` in the watched namespace;
- an experiment created in a namespace the release does not watch is accepted with a ``Warning:`` that
  names the watched namespaces (kubectl prints it), and one in a watched namespace gets none from it;
- HA and placement objects are accepted by the API server (server-side dry run): the replicas'
  PodDisruptionBudget and spread, the bench egress NetworkPolicy, and a bench pod placed by the
  cluster's ``benchPlacement`` defaults where the experiment sets none.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from spx.api.loading import load_experiment
from spx.api.policy import check_policy, policy_from_env
from spx.controller.manifests.job import BenchOptions, build_container_spec, build_pod_spec
from spx.controller.settings import OperatorSettings
from spx_testing.chart_cluster import Cluster
from spx_testing.chartlib import CHART, CRD_NAME, ROOT, installable_crd

RELEASE, RELEASE_NS, WATCHED, UNWATCHED = "first", "first-system", "first-team", "first-elsewhere"
EXAMPLE = ROOT / "examples" / "deepseek-v41-tp8.yaml"


def render(chart: Any, values: dict[str, Any]) -> list[dict[str, Any]]:
    rendered = chart.render(values, name=RELEASE, namespace=RELEASE_NS, is_install=True)
    return [d for p in sorted(rendered) if not p.endswith("NOTES.txt") for d in yaml.safe_load_all(rendered[p]) if d]


def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def test_the_example_passes_the_operators_default_policy(chart: Any) -> None:
    policy = policy_from_env(env_of(render(chart, {})))
    assert check_policy(example()["spec"], policy) == []
    with_flag = example()["spec"]
    with_flag["serving"]["extraArgs"] = ["--trust-remote-code"]  # what it used to carry: refused by default
    assert [v.rule for v in check_policy(with_flag, policy)] == ["policy.servingExtraArgs"]


def test_notes_name_the_watched_namespace(chart: Any) -> None:
    notes = next(v for k, v in chart.render({"watch": {"namespaces": [WATCHED]}}, name=RELEASE, namespace=RELEASE_NS,
                                            is_install=True).items() if k.endswith("NOTES.txt"))
    assert f"kubectl apply -n {WATCHED} -f examples/deepseek-v41-tp8.yaml" in notes
    assert f"kubectl wait -n {WATCHED} spx/deepseek-v41-fused-wqa-wkv-tp8" in notes
    assert "OBSERVED:.status.observedGeneration" in notes


@pytest.fixture(scope="module")
def admitted(cluster: Cluster, chart: Any) -> Cluster:
    for ns in (RELEASE_NS, WATCHED, UNWATCHED):
        cluster.kubectl("create", "namespace", ns, check=False)
    crd = installable_crd(yaml.safe_load((CHART / "crds" / "shardedprojectionexperiments.yaml").read_text()))
    cluster.apply([crd], server_side=True)
    cluster.wait_established(CRD_NAME)
    docs = render(chart, {"admissionPolicy": {"enabled": True}, "watch": {"namespaces": [WATCHED]}})
    cluster.apply([d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")])
    # the API server loads new policies asynchronously: wait until both act
    bad = {**example(), "metadata": {"name": "probe", "namespace": WATCHED}}
    bad["spec"] = {**bad["spec"], "image": "docker.io/probe/probe:1"}
    deadline = time.monotonic() + 90
    while True:
        refused = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(bad), check=False)
        elsewhere = {**example(), "metadata": {"name": "probe", "namespace": UNWATCHED}}
        warned = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(elsewhere), check=False)
        if "policy.imageRegistries" in refused.stderr and f"{RELEASE}-spx-operator" in warned.stderr:
            return cluster
        assert time.monotonic() < deadline, f"the policies never took effect: {refused.stderr} / {warned.stderr}"
        time.sleep(0.5)


def test_the_example_is_admitted_in_the_watched_namespace(admitted: Cluster) -> None:
    proc = admitted.kubectl("apply", "-n", WATCHED, "-f", str(EXAMPLE), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "is not watched" not in proc.stderr, proc.stderr  # no unwatched-namespace warning
    # the flagship lists NVIDIA-H100-80GB-HBM3, which the GPU-fit warning flags against the default model size
    # (an upper bound, docs/install.md "Sizing the bench pod"): a warning, the create succeeds
    assert "lists NVIDIA-H100-80GB-HBM3, which cannot hold the model at TP 8" in proc.stderr, proc.stderr
    assert admitted.get_json("spx", "deepseek-v41-fused-wqa-wkv-tp8", "-n", WATCHED)["spec"]["serving"]


def test_an_experiment_in_an_unwatched_namespace_is_flagged_at_create(admitted: Cluster) -> None:
    proc = admitted.kubectl("apply", "-n", UNWATCHED, "-f", str(EXAMPLE), check=False)
    assert proc.returncode == 0, proc.stderr  # a warning, not a refusal
    assert "Warning:" in proc.stderr and f"namespace {UNWATCHED} is not watched" in proc.stderr, proc.stderr
    assert f"(it watches: {WATCHED})" in proc.stderr and f"kubectl apply -n {WATCHED}" in proc.stderr, proc.stderr
    # and the documented check (NOTES) shows it unobserved
    rows = admitted.kubectl("get", "spx", "-A", "-o", "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,"
                            "OBSERVED:.status.observedGeneration").stdout
    assert any(line.split()[:1] == [UNWATCHED] and line.split()[-1] == "<none>" for line in rows.splitlines()), rows


def test_ha_objects_are_accepted_by_the_api_server(cluster: Cluster, chart: Any) -> None:
    cluster.kubectl("create", "namespace", RELEASE_NS, check=False)
    docs = render(chart, {})
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    anti = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert pod["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all([pdb, deployment]),
                           check=False)
    assert proc.returncode == 0, proc.stderr
    single = render(chart, {"replicaCount": 1, "leaderElection": {"enabled": False}})
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget"]  # it would block every drain
    (one,) = [d for d in single if d["kind"] == "Deployment"]
    assert "affinity" not in one["spec"]["template"]["spec"]


def test_bench_egress_policy_is_accepted(cluster: Cluster, chart: Any) -> None:
    cluster.kubectl("create", "namespace", WATCHED, check=False)
    mirror = {"peers": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [443]}
    docs = render(chart, {"watch": {"namespaces": [WATCHED]},
                          "networkPolicy": {"enabled": True, "benchEgress": {"enabled": True, "to": [mirror]}}})
    (egress,) = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-bench-egress")]
    assert egress["metadata"]["namespace"] == WATCHED and egress["spec"]["policyTypes"] == ["Egress"]
    assert egress["spec"]["egress"][1] == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
                                           "ports": [{"port": 443, "protocol": "TCP"}]}
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(egress), check=False)
    assert proc.returncode == 0, proc.stderr
    assert not [d for d in render(chart, {"networkPolicy": {"enabled": True}}) if d["metadata"]["name"].endswith("-bench-egress")]


def test_bench_pods_take_the_clusters_placement_where_the_experiment_sets_none(cluster: Cluster, chart: Any) -> None:
    """A pool without GPU Feature Discovery labels: the admin's benchPlacement (nodeSelector, taint
    toleration, gpuNodeAffinity none) reaches the bench pod through the rendered SPX_BENCH_PLACEMENT;
    an experiment that sets its own nodeSelector keeps it."""
    placement = {"nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
                 "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                 "gpuNodeAffinity": "none"}
    settings = OperatorSettings.model_validate(
        {"SPX_BENCH_PLACEMENT": env_of(render(chart, {"benchPlacement": placement}))["SPX_BENCH_PLACEMENT"]})
    options = BenchOptions(placement=settings.bench_placement)
    spec = load_experiment(EXAMPLE.read_text()).spec

    def pod_spec(s: Any) -> dict[str, Any]:
        return build_pod_spec(build_container_spec("e", WATCHED, s, "ghcr.io/spx-dev/spx-bench:0.1.0", options), s,
                              options)

    placed = pod_spec(spec)
    assert placed["nodeSelector"] == placement["nodeSelector"]
    assert placement["tolerations"][0] in placed["tolerations"]
    assert "affinity" not in placed  # gpuNodeAffinity none: no GPU Feature Discovery labels required
    own = spec.model_copy(update={"resources": spec.resources.model_copy(update={
        "node_selector": {"kubernetes.io/hostname": "gpu-7"}, "gpu_node_affinity": "required"})})
    mine = pod_spec(own)
    assert mine["nodeSelector"] == {"kubernetes.io/hostname": "gpu-7"}
    assert mine["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert pod_spec(spec.model_copy()) == placed and BenchOptions().placement is None
    cluster.kubectl("create", "namespace", WATCHED, check=False)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "placed", "namespace": WATCHED}, "spec": placed}
    proc = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(pod), check=False)
    assert proc.returncode == 0, proc.stderr
