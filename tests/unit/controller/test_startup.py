"""The operator's start-up (kopf's startup handler, :func:`spx.controller.handlers.configure`): it reads
the installed CRD through the operator's own client and refuses to start on a mismatch
(:mod:`spx.controller.crd_check`); ``spx operator`` then exits with ``crd_check.EXIT_CODE`` and the
message naming the fixing command. ``SPX_CRD_CHECK=false`` skips the check.

The API server is the emulator of ``tests/integration`` (a stand-in until the real-control-plane
fixture lands); tests/chart/test_crd_lifecycle.py runs the passing check on a real API server.
"""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))

from emulator import Cluster

from spx import __version__
from spx.api.crd import build_crd
from spx.api.crd_version import SCHEMA_VERSION, SCHEMA_VERSION_LABEL
from spx.controller import crd_check, handlers
from spx.controller.settings import load_settings

CRD_API = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)  # no CRD yet: each test installs the one it needs
    yield c
    c.close()


def crd(version: Any = SCHEMA_VERSION) -> dict[str, Any]:
    out = copy.deepcopy(build_crd())
    if version is None:
        del out["metadata"]["labels"][SCHEMA_VERSION_LABEL]
    else:
        out["metadata"]["labels"][SCHEMA_VERSION_LABEL] = str(version)
    return out


def start(cluster: Cluster, **settings: Any) -> kopf.Memo:
    """Run the startup handler as kopf does; stop what it started again. Returns the memo."""
    memo = kopf.Memo(settings=load_settings({}, kube_server=cluster.url, metrics_port=0, **settings))

    async def run() -> None:
        await handlers.configure(settings=kopf.OperatorSettings(), memo=memo)
        await handlers.shutdown(memo=memo)

    asyncio.run(run())
    return memo


@pytest.mark.parametrize(("installed", "words"), [
    (None, ["is not installed"]),
    (crd(version=None), ["has no bench.spx.dev/schema-version label", "prune"]),
    (crd(version=SCHEMA_VERSION - 1), ["older", "Helm never does"]),
    (crd(version=SCHEMA_VERSION + 1), ["newer", "helm upgrade"]),
], ids=["missing", "unlabelled", "older", "newer"])
def test_the_operator_refuses_to_start_on_a_crd_it_was_not_built_for(cluster: Cluster, installed: dict | None,
                                                                     words: list[str]) -> None:
    if installed is not None:
        cluster.call(cluster.emulator.install_crd, installed)
    with pytest.raises(handlers.CrdMismatch) as err:
        start(cluster)
    for w in words:
        assert w in str(err.value)
    assert crd_check.fix_command(__version__) in str(err.value)
    assert isinstance(err.value, kopf.PermanentError)  # kopf does not retry it: the operator stops
    crd_gets = [p for m, p, _ in cluster.emulator.api_requests if m == "GET" and "customresourcedefinitions" in p]
    assert crd_gets == [handlers.CRD_PATH]  # read once, by name, through the operator's client


def test_the_operator_starts_on_its_own_crd(cluster: Cluster) -> None:
    cluster.call(cluster.emulator.install_crd, crd())
    memo = start(cluster)
    assert memo.get("reactor") is not None


def test_spx_crd_check_false_skips_the_check(cluster: Cluster) -> None:
    memo = start(cluster, crd_check=False)  # no CRD at all
    assert memo.get("reactor") is not None
    assert not [p for _, p, _ in cluster.emulator.api_requests if "customresourcedefinitions" in p]
    assert load_settings({"SPX_CRD_CHECK": "false"}).crd_check is False
    assert load_settings({"SPX_CRD_CHECK": ""}).crd_check is True


def _spx(cluster: Cluster, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``spx operator`` logged in with SPX_KUBE_SERVER only (no kubeconfig, not in a pod)."""
    full = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
            "KUBERNETES_SERVICE_HOST": "", "SPX_KUBE_SERVER": cluster.url, "SPX_METRICS_PORT": "0", **env}
    exe = Path(sys.executable).with_name("spx")
    return subprocess.run([str(exe), "operator", "--liveness=", "--log-format=plain", "-n", "default"], env=full,
                          capture_output=True, text=True, timeout=120)


def test_spx_operator_exits_with_the_crd_check_code_and_the_fix(cluster: Cluster, tmp_path: Path) -> None:
    cluster.call(cluster.emulator.install_crd, crd(version=SCHEMA_VERSION - 1))
    proc = _spx(cluster, tmp_path, {})
    assert proc.returncode == crd_check.EXIT_CODE, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("spx operator: CRD shardedprojectionexperiments.bench.spx.dev has schema")
    assert "kubectl apply --server-side" in last


def test_spx_operator_exits_with_the_usage_code_on_a_bad_policy(cluster: Cluster, tmp_path: Path) -> None:
    from spx.exit_codes import EXIT_USAGE

    proc = _spx(cluster, tmp_path, {"SPX_POLICY": '{"imageRegistries": ["ghcr.io/spx-dev"]}'})
    assert proc.returncode == EXIT_USAGE, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("spx operator: SPX_POLICY=") and "must end in '/'" in line
