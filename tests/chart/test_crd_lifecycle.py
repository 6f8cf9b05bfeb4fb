"""The CRD's lifecycle: the schema-version label, the operator's start-up check
(spx.controller.decide.crd_check, table-tested), and the upgrade path of docs/install.md on a real API
server — the CRD of an earlier commit (013193d) with an object created under it, then this
release's CRD applied over it: the object is still readable and valid, and status fields only the
new schema declares stop being pruned.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from spx import __version__
from spx.api import validate_spec
from spx.api.crd import build_crd
from spx.api.crd_version import SCHEMA_FINGERPRINT, SCHEMA_VERSION, SCHEMA_VERSION_LABEL, fingerprint, labelled
from spx.controller.decide.crd_check import check_crd, fix_command
from spx_testing.chart_cluster import Cluster, run_operator
from spx_testing.chartlib import CHART, CRD_NAME, installable_crd

DATA = Path(__file__).resolve().parent / "data"
OLD_CRD = DATA / "crd-013193d.yaml"
OLD_EXPERIMENT = DATA / "experiment-013193d.yaml"


def test_schema_version_is_bumped_with_every_schema_change() -> None:
    now = fingerprint(build_crd()["spec"])
    assert now == SCHEMA_FINGERPRINT, (
        f"the generated CRD's schema changed: set SCHEMA_VERSION = {SCHEMA_VERSION + 1} and "
        f"SCHEMA_FINGERPRINT = {now!r} in operator/spx/api/crd_version.py (an operator must refuse the "
        "CRD of the previous schema), then regenerate crds/: scripts/regen.sh does both"
    )


def test_generated_crd_carries_the_schema_version_label() -> None:
    labels = build_crd()["metadata"]["labels"]
    assert labels.get(SCHEMA_VERSION_LABEL) == str(SCHEMA_VERSION)
    chart_copy = yaml.safe_load((CHART / "crds" / "shardedprojectionexperiments.yaml").read_text())
    assert chart_copy["metadata"]["labels"].get(SCHEMA_VERSION_LABEL) == str(SCHEMA_VERSION)


def _crd(version: Any = SCHEMA_VERSION, served: tuple[str, ...] = ("v1alpha1",)) -> dict[str, Any]:
    crd = copy.deepcopy(build_crd())
    if version is None:  # a CRD from before schema versioning
        crd["metadata"]["labels"].pop(SCHEMA_VERSION_LABEL, None)
    else:
        crd["metadata"]["labels"][SCHEMA_VERSION_LABEL] = str(version)
    crd["spec"]["versions"] = [{**crd["spec"]["versions"][0], "name": v} for v in served]
    return crd


@pytest.mark.parametrize(
    ("installed", "ok", "version", "words"),
    [
        (_crd(), True, SCHEMA_VERSION, ["as this operator expects"]),
        (None, False, None, ["is not installed"]),
        (_crd(version=None), False, None, ["has no bench.spx.dev/schema-version label", "prune"]),
        (_crd(version="one"), False, None, ["not an integer"]),
        (_crd(version=SCHEMA_VERSION - 1), False, SCHEMA_VERSION - 1, ["older", "pruned", "Helm never does"]),
        (_crd(version=SCHEMA_VERSION + 1), False, SCHEMA_VERSION + 1, ["newer", "helm upgrade"]),
        (_crd(served=("v1beta1",)), False, SCHEMA_VERSION, ["does not serve v1alpha1", "v1beta1"]),
    ],
    ids=["current", "missing", "unlabelled", "malformed", "older", "newer", "not-served"],
)
def test_check_crd(installed: dict[str, Any] | None, ok: bool, version: int | None, words: list[str]) -> None:
    result = check_crd(installed, "9.9.9")
    assert (result.ok, result.installed_version) == (ok, version)
    for w in words:
        assert w in result.message, result.message
    if not ok:  # every refusal says how to fix it, for this operator's version
        assert fix_command("9.9.9") in result.message and "spx 9.9.9" in result.message


def _status_with_nccl_env() -> dict[str, Any]:
    return {"phase": "Pending", "environment": {"gpu": "NVIDIA-H200", "ncclEnv": {"NCCL_NVLS_ENABLE": "0"}}}


def test_upgrade_path_on_a_real_api_server(cluster: Cluster, chart: Any, tmp_path: Path) -> None:
    """docs/install.md "Upgrading": old CRD + old objects → server-side apply of the new CRD → the
    objects are still readable and valid, and this release's operator (under the chart's service
    account) reconciles the old object: creates its Job and writes a status the new schema keeps."""
    old = yaml.safe_load(OLD_CRD.read_text())
    cluster.kubectl("create", "namespace", "upgrade", check=False)
    cluster.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=true")
    cluster.apply([old])  # as `helm install` of that release did (client-side)
    cluster.wait_established(CRD_NAME)
    exp = yaml.safe_load(OLD_EXPERIMENT.read_text())
    exp["metadata"]["namespace"] = "upgrade"
    cluster.apply([exp])
    name = exp["metadata"]["name"]

    # The failure mode the start-up check exists for: the old schema prunes a field the new operator writes.
    patch = yaml.safe_dump({"status": _status_with_nccl_env()})
    cluster.kubectl("patch", "spx", name, "-n", "upgrade", "--subresource=status", "--type=merge", "-p", patch)
    env = cluster.get_json("spx", name, "-n", "upgrade")["status"]["environment"]
    assert env == {"gpu": "NVIDIA-H200"}, "the old CRD was expected to prune status.environment.ncclEnv"
    result = check_crd(cluster.get_json("crd", CRD_NAME), __version__)
    assert not result.ok and "no bench.spx.dev/schema-version label" in result.message

    # The upgrade: this release's CRD, server-side (takes the fields over from the client-side apply).
    new = installable_crd(labelled(build_crd()))
    cluster.apply([new], server_side=True)
    cluster.wait_established(CRD_NAME)
    installed = cluster.get_json("crd", CRD_NAME)
    assert check_crd(installed, __version__).ok

    obj = cluster.get_json("spx", name, "-n", "upgrade")
    validate_spec(obj["spec"], f"{name} after the upgrade")  # still a valid experiment for this operator
    assert obj["spec"] == {k: v for k, v in exp["spec"].items()}, "the upgrade changed the stored spec"
    cluster.kubectl("patch", "spx", name, "-n", "upgrade", "--subresource=status", "--type=merge", "-p", patch)
    env = cluster.get_json("spx", name, "-n", "upgrade")["status"]["environment"]
    assert env["ncclEnv"] == {"NCCL_NVLS_ENABLE": "0"}, "the new CRD must keep status.environment.ncclEnv"

    # ... and the new operator picks the old object up (a fresh status: as after a spec change)
    cluster.kubectl("patch", "spx", name, "-n", "upgrade", "--subresource=status", "--type=json",
                    "-p", '[{"op": "remove", "path": "/status"}]')
    cluster.kubectl("create", "namespace", "spx-system", check=False)
    rendered = chart.render({"watch": {"namespaces": ["upgrade"]}}, name="up", namespace="spx-system", is_install=True)
    docs = [d for p in sorted(rendered) if not p.endswith("NOTES.txt") for d in yaml.safe_load_all(rendered[p]) if d]
    cluster.apply([d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                                    "ClusterRoleBinding")])
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    token = cluster.sa_token("spx-system", deployment["spec"]["template"]["spec"]["serviceAccountName"])
    with run_operator(cluster, deployment, token, tmp_path) as operator:
        status = operator.wait(
            "the operator to reconcile the pre-upgrade experiment",
            lambda: (cluster.get_json("spx", name, "-n", "upgrade").get("status") or {}).get("jobName") and
            cluster.get_json("spx", name, "-n", "upgrade")["status"], 120)
        assert status["phase"] in ("Pending", "Running"), status
        assert not operator.refusals(), operator.refusals()[:5]


def test_the_decided_by_column_on_a_real_api_server(cluster: Cluster) -> None:
    """Issue #36: `kubectl get spx` shows what decided the verdict (DECIDED-BY, status.kernel.decidedBy),
    printed by the real API server from this release's CRD."""
    cluster.kubectl("create", "namespace", "columns", check=False)
    cluster.apply([installable_crd(labelled(build_crd()))], server_side=True)
    cluster.wait_established(CRD_NAME)
    exp = yaml.safe_load(OLD_EXPERIMENT.read_text())
    exp["metadata"] = {"name": "decided", "namespace": "columns"}
    cluster.apply([exp])
    status = {"phase": "Succeeded", "verdict": "Fail",
              "kernel": {"crossoverTokens": 234.0, "recommendedThresholdTokens": 256, "decidedBy": "step"}}
    cluster.kubectl("patch", "spx", "decided", "-n", "columns", "--subresource=status", "--type=merge",
                    "-p", yaml.safe_dump({"status": status}))
    import re

    header, row = cluster.kubectl("get", "spx", "decided", "-n", "columns").stdout.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]  # kubectl aligns each column under its name
    columns = {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)}
    assert "DECIDED-BY" in columns, header
    assert columns["VERDICT"] == "Fail" and columns["DECIDED-BY"] == "step", (header, row)


def _git(*args: str) -> str | None:
    """``git args`` in the repository; None where there is no git or no history (a tarball, a shallow clone)."""
    import shutil
    import subprocess

    if shutil.which("git") is None:
        return None
    proc = subprocess.run(["git", "-C", str(CHART.parents[1]), *args], capture_output=True, text=True, timeout=60)
    return proc.stdout if proc.returncode == 0 else None


def test_a_schema_label_is_never_reused_for_another_schema() -> None:
    """Issue #36: the label went 4 → 5 → 6 → 5 and two CRDs both carried 4. Every (SCHEMA_VERSION,
    SCHEMA_FINGERPRINT) pair crd_version.py ever held is read from git: the current version must be above
    every earlier one, unless it is the same pair (an unchanged schema)."""
    import re

    path = "operator/spx/api/crd_version.py"
    log = _git("log", "--format=%H", "--", path)
    if not log or _git("rev-parse", "--is-shallow-repository") == "true\n":
        pytest.skip("no git history here (a source tarball or shallow clone): cannot compare with earlier schemas")
    pairs = set()
    for commit in log.split():
        text = _git("show", f"{commit}:{path}") or ""
        v = re.search(r"^SCHEMA_VERSION: Final = (\d+)", text, re.M)
        f = re.search(r'^SCHEMA_FINGERPRINT: Final = "([0-9a-f]+)"', text, re.M)
        if v and f:
            pairs.add((int(v.group(1)), f.group(1)))
    earlier = {(v, f) for v, f in pairs if (v, f) != (SCHEMA_VERSION, SCHEMA_FINGERPRINT)}
    reused = sorted(f for v, f in earlier if v == SCHEMA_VERSION)
    assert not reused, (f"schema label {SCHEMA_VERSION} named another schema before ({reused}): "
                        f"use {max(v for v, _ in pairs) + 1}")
    assert all(v < SCHEMA_VERSION for v, _ in earlier), (
        f"schema label {SCHEMA_VERSION} is not above every earlier one ({sorted({v for v, _ in earlier})})")
