"""Session fixtures: a real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager).

``control_plane`` starts once per session when ``KUBEBUILDER_ASSETS`` names a folder with the
binaries (see tests/support/spx_testing/controlplane.py for how to get them), installs the CRD from
``crds/`` with server-side apply and strict field validation, and stops everything at the end.
Without the binaries, the tests that need it are skipped with a message that says how to get them.
When a test failed, the control plane's logs are copied into the session's tmp dir and their tails
printed.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
from spx_testing.controlplane import CRD_FILE, HOW_TO_GET, ControlPlane, install_crd, missing_assets  # noqa: E402
from spx_testing.kubeapi import Api  # noqa: E402


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    why = missing_assets(os.environ.get("KUBEBUILDER_ASSETS"))
    if why:
        pytest.skip(f"no Kubernetes control plane: {why}; {HOW_TO_GET}")
    workdir = tmp_path_factory.mktemp("control-plane")
    cp = ControlPlane(Path(os.environ["KUBEBUILDER_ASSETS"]), workdir)
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:  # `timeout`, CI cancellation: no orphaned control plane
        cp.stop()
        signal.signal(signal.SIGTERM, previous)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    cp.start()
    try:
        api = Api(cp.url, cp.token, cp.ssl_context())
        install_crd(api, yaml.safe_load(CRD_FILE.read_text()))
        yield cp
    finally:
        cp.stop()
        signal.signal(signal.SIGTERM, previous)
        if request.session.testsfailed:
            kept = tmp_path_factory.getbasetemp() / "control-plane-logs"
            shutil.copytree(cp.logs, kept, dirs_exist_ok=True)
            tails = "\n".join(f"--- {n}.log (last lines)\n{cp.log_tail(n, 15)}"
                              for n in ("etcd", "kube-apiserver", "kube-controller-manager"))
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            text = f"control plane logs kept in {kept}\n{tails}"
            if reporter is not None:
                reporter.write_line(text)
            else:
                print(text, file=sys.stderr)


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Api:
    """An admin client of the session's API server."""
    return Api(control_plane.url, control_plane.token, control_plane.ssl_context())
