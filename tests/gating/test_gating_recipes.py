"""The gating recipes of examples/gating/: the Argo Rollouts AnalysisTemplate validates against the
(vendored) Argo Rollouts CRD schema and reads only exported metrics; the kubectl script is valid
bash. Both are run for real in tests/gating/test_gate_cluster.py (kubectl against the emulated API)
and tests/observability/test_obs_prometheus.py (the template's query in a real Prometheus)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GATING = ROOT / "examples" / "gating"
from spx_testing.chartlib import load_crd, validate_against_crd  # noqa: E402
from spx_testing.obslib import metric_names, registry_series_names  # noqa: E402


def _template() -> dict:
    return yaml.safe_load((GATING / "analysis-template.yaml").read_text())


def test_analysis_template_validates_against_the_argo_rollouts_crd() -> None:
    crd = load_crd(ROOT / "tests" / "data" / "crds" / "argoproj.io_analysistemplates.yaml")
    problems = validate_against_crd(_template(), crd)
    assert not problems, problems


def test_analysis_template_maps_verdicts_to_argo_outcomes() -> None:
    (metric,) = _template()["spec"]["metrics"]
    assert metric["successCondition"].endswith("result[0] == 1")
    assert metric["failureCondition"].endswith("result[0] == -1")
    query = metric["provider"]["prometheus"]["query"]
    assert metric_names(query) == {"spx_verdict"} <= registry_series_names()
    args = {a["name"] for a in _template()["spec"]["args"]}
    for arg in ("experiment", "namespace", "prometheus-address"):
        assert arg in args and "{{args." + arg + "}}" in yaml.safe_dump(metric)


def test_wait_script_is_valid_bash() -> None:
    script = GATING / "wait-for-verdict.sh"
    assert script.stat().st_mode & 0o111, "wait-for-verdict.sh must be executable"
    assert subprocess.run(["bash", "-n", str(script)], timeout=30).returncode == 0
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout


def test_wait_script_usage_error_without_a_name() -> None:
    """No NAME (or too many arguments) is exit 3, the usage code of `spx gate` — not 1, which means Fail."""
    for argv in ([], ["a", "b", "c", "d"]):
        proc = subprocess.run(["bash", str(GATING / "wait-for-verdict.sh"), *argv], capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 3 and "usage" in proc.stderr


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_wait_script_unreachable_cluster_is_exit_4(tmp_path: Path) -> None:
    """The real kubectl against an API server address nothing listens on: exit 4, kubectl's last line."""
    import json
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}], "users": [{"name": "u", "user": {}}],
    }))
    proc = subprocess.run(["bash", str(GATING / "wait-for-verdict.sh"), "h200-tp8"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.startswith("Unreachable") and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("path", sorted(GATING.glob("*.yaml")), ids=lambda p: p.name)
def test_gating_yaml_parses(path: Path) -> None:
    assert list(yaml.safe_load_all(path.read_text()))
