"""The operator's start-up against the real API server: it reads the installed CRD through its own client
and refuses to start on a schema it was not built for (:mod:`spx.controller.decide.crd_check`): ``spx operator``
exits with ``crd_check.EXIT_CODE`` and the message naming the fixing command; ``SPX_CRD_CHECK=false``
skips the check; a bad ``SPX_POLICY`` is a usage error before any cluster call.

Only the CRD's schema-version *label* is changed here (and put back): the schema, and every other test's
objects on the shared control plane, stay as they are. The pure judgement is table-tested in
tests/chart/test_crd_lifecycle.py, which also runs an upgrade on a control plane of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spx.api.crd_version import SCHEMA_VERSION, SCHEMA_VERSION_LABEL
from spx.api.exit_codes import EXIT_USAGE
from spx.controller.decide import crd_check
from spx_testing.controlplane import ControlPlane

CRD = "customresourcedefinitions.apiextensions.k8s.io/shardedprojectionexperiments.bench.spx.dev"


def _kubectl(cp: ControlPlane, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    return subprocess.run([cp.kubectl(), *args], env=env, capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.fixture
def older_label(control_plane: ControlPlane) -> Iterator[None]:
    _kubectl(control_plane, "label", CRD, f"{SCHEMA_VERSION_LABEL}={SCHEMA_VERSION - 1}", "--overwrite")
    try:
        yield
    finally:
        _kubectl(control_plane, "label", CRD, f"{SCHEMA_VERSION_LABEL}={SCHEMA_VERSION}", "--overwrite")


def _spx(cp: ControlPlane, tmp_path: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``spx operator`` with a kubeconfig for the real server (admin token), watching one namespace."""
    full = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(cp.kubeconfig), "KUBERNETES_SERVICE_HOST": "",
            "SPX_METRICS_PORT": "0", **env}
    exe = Path(sys.executable).with_name("spx")
    return subprocess.run([str(exe), "operator", "--liveness=", "--log-format=plain", "-n", "startup-check"], env=full,
                          capture_output=True, text=True, timeout=timeout)


def test_spx_operator_refuses_an_older_crd_with_the_fix(control_plane: ControlPlane, older_label: None,
                                                       tmp_path: Path) -> None:
    proc = _spx(control_plane, tmp_path, {})
    assert proc.returncode == crd_check.EXIT_CODE, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("spx operator: CRD shardedprojectionexperiments.bench.spx.dev has schema"), last
    assert "kubectl apply --server-side" in last


def test_spx_crd_check_false_starts_on_an_older_crd(control_plane: ControlPlane, older_label: None,
                                                  tmp_path: Path) -> None:
    """With the check off the operator starts and runs until stopped (it is stopped by the timeout here)."""
    with pytest.raises(subprocess.TimeoutExpired):
        _spx(control_plane, tmp_path, {"SPX_CRD_CHECK": "false"}, timeout=15)


def test_spx_operator_exits_with_the_usage_code_on_a_bad_policy(control_plane: ControlPlane, tmp_path: Path) -> None:
    proc = _spx(control_plane, tmp_path, {"SPX_POLICY": '{"imageRegistries": ["ghcr.io/spx-dev"]}'})
    assert proc.returncode == EXIT_USAGE, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("spx operator: SPX_POLICY=") and "must end in '/'" in line
