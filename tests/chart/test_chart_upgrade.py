"""Upgrades without surprises (issue #36): the chart's version moves with every chart or CRD change, an
earlier chart's values tree renders under `--reuse-values` (no nil pointer), the status fields a schema
change drops are named in docs/install.md, and the documented upgrade from the previous released chart
works with the real Helm on the real control plane.

"Earlier" and "previous" come from git (spx_testing.chart_history); in a clone without history these
tests skip and say so. The upgrade test decides its experiment by writing the status the previous
release's operator writes (there is no kubelet here to run that release's Deployment): the status is the
stand-in, the CRDs, Helm, the API server and the new operator's CRD check are real.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from spx.api import validate_spec
from spx.api.crd_version import SCHEMA_VERSION, SCHEMA_VERSION_LABEL
from spx.controller.decide.crd_check import check_crd
from spx_testing.chart_cluster import Cluster
from spx_testing.chart_history import (
    CHART_DIR,
    CRD_FILE,
    NO_HISTORY,
    chart_yaml,
    commits_touching,
    extract,
    git,
    has_history,
    previous_release,
    status_paths,
)
from spx_testing.chartlib import CHART, CRD_NAME, ROOT

INSTALL_DOC = ROOT / "docs" / "install.md"


def _helm() -> str:
    import os

    found = os.environ.get("SPX_HELM") or shutil.which("helm") or str(ROOT / ".venv" / "bin" / "helm")
    if not Path(found).is_file():
        pytest.skip("no helm binary: run scripts/get-helm.sh (or set SPX_HELM)")
    return found


def _semver(v: str) -> tuple[int, int, int]:
    major, minor, patch = (int(x) for x in re.match(r"(\d+)\.(\d+)\.(\d+)", v).groups())  # type: ignore[union-attr]
    return major, minor, patch


# --------------------------------------------------------------------------- versions that mean something


def test_the_chart_version_moves_with_every_chart_or_crd_change() -> None:
    """crds/ or charts/ differ from the previous commit (HEAD~1, first parent; uncommitted changes count)
    → Chart.yaml's version and appVersion differ from that commit's and are higher; a CRD schema change
    (SCHEMA_VERSION differs) is at least a minor bump."""
    if not has_history():
        pytest.skip(NO_HISTORY)
    changed = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD~1", "--", "charts", "crds"],
                             timeout=60).returncode != 0
    if not changed:
        return
    old, new = chart_yaml("HEAD~1"), chart_yaml()
    fix = "bump charts/spx-operator/Chart.yaml (scripts/release.sh NEW_VERSION --bump)"
    assert _semver(new["version"]) > _semver(old["version"]), (
        f"crds/ or charts/ changed since HEAD~1 but the chart version is {new['version']} (was {old['version']}): {fix}")
    assert new["appVersion"] != old["appVersion"], f"appVersion is still {old['appVersion']}: {fix}"
    old_schema = re.search(r"^SCHEMA_VERSION: Final = (\d+)", git("show", "HEAD~1:operator/spx/api/crd_version.py") or "",
                           re.M)
    if old_schema and int(old_schema.group(1)) != SCHEMA_VERSION:
        assert _semver(new["version"])[:2] > _semver(old["version"])[:2], (
            f"the CRD schema changed ({old_schema.group(1)} → {SCHEMA_VERSION}): a minor bump at least, not {new['version']}")


# --------------------------------------------------------------------------- reused values trees


def test_every_earlier_values_tree_renders_or_is_refused_by_name(tmp_path: Path) -> None:
    """`helm upgrade --reuse-values` renders the new chart with the old release's values tree in place of
    the new defaults. With each values.yaml this chart ever had, the chart renders — or the schema refuses
    it naming the missing key (trees older than replicaCount/leaderElection; docs/install.md says to use
    --reset-then-reuse-values there) — and never stops on a nil pointer (the podDisruptionBudget failure)."""
    if not has_history():
        pytest.skip(NO_HISTORY)
    helm = _helm()
    rendered, refused = [], []
    for commit in commits_touching(f"{CHART_DIR}/values.yaml"):
        chart = tmp_path / commit[:12]
        shutil.copytree(CHART, chart)
        (chart / "values.yaml").write_text(git("show", f"{commit}:{CHART_DIR}/values.yaml"))
        proc = subprocess.run([helm, "template", "spx", str(chart), "-n", "spx-system"], capture_output=True, text=True,
                              timeout=120)
        assert "nil pointer" not in proc.stderr, (commit[:12], proc.stderr[-800:])
        if proc.returncode == 0:
            rendered.append(yaml.safe_load(git("show", f"{commit}:{CHART_DIR}/values.yaml")))
        else:
            assert "missing propert" in proc.stderr, (commit[:12], proc.stderr[-800:])
            refused.append(commit)
    # the case: a tree from before podDisruptionBudget (and benchPlacement, benchEgress) renders
    assert any("podDisruptionBudget" not in v for v in rendered), "no tree without podDisruptionBudget was rendered"


# --------------------------------------------------------------------------- status a schema change drops


def _documented_drops() -> set[str]:
    text = INSTALL_DOC.read_text()
    section = text[text.index("### Status fields a schema change drops"):]
    return set(re.findall(r"`(status\.[^`]+)`", section.split("\n## ", 1)[0]))


def test_every_status_field_an_earlier_crd_declared_is_kept_or_named() -> None:
    """A status path an earlier CRD (any commit of crds/) declared and this one does not is pruned from
    stored objects once this CRD is applied: docs/install.md must name it (issue #36: the docs called the
    new schema a superset while 10 paths vanished)."""
    if not has_history():
        pytest.skip(NO_HISTORY)
    now = status_paths(yaml.safe_load((ROOT / CRD_FILE).read_text()))
    dropped: set[str] = set()
    for commit in commits_touching(CRD_FILE):
        dropped |= status_paths(yaml.safe_load(git("show", f"{commit}:{CRD_FILE}"))) - now
    named = _documented_drops()
    missing = sorted(p for p in dropped if not any(p == n or p.startswith(n + ".") or p.startswith(n + "[")
                                                   for n in named))
    assert not missing, f"docs/install.md does not name these dropped status fields: {missing}"


# --------------------------------------------------------------------------- the documented upgrade, for real


def _documented_upgrade() -> list[str]:
    """The `helm upgrade` line of docs/install.md's "Upgrading" section, as words."""
    text = INSTALL_DOC.read_text()
    section = text[text.index("## Upgrading"):].split("\n## ", 1)[0]
    (line,) = [x for x in section.splitlines() if x.startswith("helm upgrade ")]
    return shlex.split(line)


def _decided_status() -> dict[str, Any]:
    """A decided status as the previous release's operator writes it (the stand-in for its reconcile)."""
    return {"phase": "Succeeded", "verdict": "Fail", "verdictReasons": ["the split loses at 2048 tokens"],
            "conditions": [{"type": "Decided", "status": "True", "reason": "Fail", "message": "decided",
                            "lastTransitionTime": "2026-12-07T05:00:00Z"}],
            "environment": {"gpu": "NVIDIA H200", "vllm": "0.33.0", "device": "cuda"},
            "kernel": {"crossoverTokens": 234.0, "recommendedThresholdTokens": 256, "decidedBy": "kernel",
                       "points": [{"tokens": 2048, "rowsPerRank": 256, "replicatedUs": 64.0, "splitUs": 70.2,
                                   "speedup": 0.91}]}}


@pytest.mark.parametrize("values_flag", [None, "--reuse-values"], ids=["documented", "reuse-values"])
def test_upgrade_from_the_previous_release_with_the_documented_command(cluster: Cluster, tmp_path: Path,
                                                                       values_flag: str | None) -> None:
    """Install the previous released chart (git archive of the last commit with another chart version),
    create and decide an experiment, then upgrade as docs/install.md says: this release's CRD server-side,
    then its `helm upgrade` line (and the same line with plain --reuse-values, the issue's failing
    command). The release upgrades, the experiment and its decided status survive, and this operator's
    start-up check accepts the CRD."""
    if not has_history():
        pytest.skip(NO_HISTORY)
    previous = previous_release()
    if previous is None:
        pytest.skip("this history has no earlier chart version")
    helm, ns, watched = _helm(), "spx-upgrade", "upgrade-exp"
    old_chart = extract(previous, [CHART_DIR], tmp_path / "previous") / CHART_DIR
    for n in (ns, watched):
        cluster.kubectl("create", "namespace", n, check=False)
    cluster.kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=true")
    base = ["--kubeconfig", cluster.kubeconfig, "-n", ns]
    proc = subprocess.run([helm, "install", "spx", str(old_chart), *base, "--set", f"watch.namespaces[0]={watched}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cluster.wait_established(CRD_NAME)
    old_label = cluster.get_json("crd", CRD_NAME)["metadata"]["labels"].get(SCHEMA_VERSION_LABEL)

    exp = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    exp["metadata"] = {"name": "before-upgrade", "namespace": watched}
    cluster.apply([exp])
    cluster.kubectl("patch", "spx", "before-upgrade", "-n", watched, "--subresource=status", "--type=merge",
                    "-p", yaml.safe_dump({"status": _decided_status()}))

    # docs/install.md "Upgrading": 1. the CRD (server-side), 2. the documented helm upgrade line
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds" / "shardedprojectionexperiments.yaml"))
    cluster.wait_established(CRD_NAME)
    words = _documented_upgrade()
    assert words[:4] == ["helm", "upgrade", "spx", "charts/spx-operator"], words
    assert "--reset-then-reuse-values" in words, words
    if values_flag is not None:
        words = [values_flag if w == "--reset-then-reuse-values" else w for w in words]
    args = [helm, "upgrade", "spx", str(CHART), *[w for w in words[4:] if w not in ("-n", "spx-system")],
            "--kubeconfig", cluster.kubeconfig, "-n", ns]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (shlex.join(words), proc.stderr)

    history = subprocess.run([helm, "history", "spx", *base, "-o", "json"], capture_output=True, text=True, timeout=60)
    charts = [h["chart"] for h in yaml.safe_load(history.stdout)]
    assert charts == [f"spx-operator-{chart_yaml(previous)['version']}", f"spx-operator-{chart_yaml()['version']}"], charts
    assert charts[0] != charts[1]  # helm history tells the two releases apart

    installed = cluster.get_json("crd", CRD_NAME)
    assert installed["metadata"]["labels"][SCHEMA_VERSION_LABEL] == str(SCHEMA_VERSION), old_label
    assert check_crd(installed, "upgraded").ok
    obj = cluster.get_json("spx", "before-upgrade", "-n", watched)
    validate_spec(obj["spec"], "before-upgrade after the upgrade")
    assert obj["status"]["verdict"] == "Fail" and obj["status"]["kernel"]["points"][0]["speedup"] == 0.91
    # the operator Deployment of the new release carries the new version
    deployment = cluster.get_json("deployment", "-n", ns, "-l", "app.kubernetes.io/name=spx-operator")["items"][0]
    assert deployment["metadata"]["labels"]["helm.sh/chart"] == f"spx-operator-{chart_yaml()['version']}"
    subprocess.run([helm, "uninstall", "spx", *base], capture_output=True, timeout=120)
