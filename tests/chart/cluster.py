"""A real Kubernetes control plane for the chart's RBAC, admission-policy and CRD-upgrade tests.

etcd + kube-apiserver (RBAC on, the admin token in ``system:masters``) from ``KUBEBUILDER_ASSETS``
(envtest's layout), started by ``start-control-plane.sh`` next to this file on loopback ports and
stopped by PID at the end of the session. Tests that need it skip with a message when
``KUBEBUILDER_ASSETS`` is unset. Everything goes through the real ``kubectl`` of the same folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "start-control-plane.sh"
SKIP_REASON = (
    "KUBEBUILDER_ASSETS is unset: these tests need a real kube-apiserver and etcd (envtest layout; "
    "e.g. `export KUBEBUILDER_ASSETS=$(bash ../shared/envtest/unpack.sh /tmp/spx-envtest)` or "
    "`setup-envtest use -p path`)"
)
START_TIMEOUT_S = 180.0


@dataclass
class Cluster:
    """A running control plane: its admin kubeconfig and the kubectl to talk to it."""

    kubeconfig: str
    kubectl_bin: str

    def kubectl(self, *args: str, stdin: str | None = None, token: str | None = None,
                check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the cluster (as admin, or with ``token`` as someone else)."""
        cmd = [self.kubectl_bin, "--kubeconfig", self.kubeconfig]
        if token is not None:
            cmd += ["--token", token]
        proc = subprocess.run([*cmd, *args], input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def apply(self, docs: Sequence[dict[str, Any]], *, token: str | None = None, check: bool = True,
              server_side: bool = False) -> subprocess.CompletedProcess[str]:
        args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
        return self.kubectl(*args, stdin=yaml.safe_dump_all(list(docs)), token=token, check=check)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def wait_established(self, crd_name: str) -> None:
        self.kubectl("wait", "--for=condition=Established", f"crd/{crd_name}", "--timeout=60s")
        # discovery may lag the condition by a moment: wait until kubectl can resolve the resource
        deadline = time.monotonic() + 60
        while self.kubectl("get", crd_name.split(".", 1)[0], "-A", check=False).returncode != 0:
            assert time.monotonic() < deadline, f"{crd_name} never became usable"
            time.sleep(0.2)

    def sa_token(self, namespace: str, name: str) -> str:
        """A token of ServiceAccount ``namespace/name`` from the TokenRequest API."""
        return self.kubectl("create", "token", name, "-n", namespace, "--duration=1h").stdout.strip()


def start() -> Iterator[Cluster]:
    """Start a control plane, yield it, stop it (every process it started, by PID)."""
    assets = os.environ["KUBEBUILDER_ASSETS"]
    proc = subprocess.Popen(["bash", str(SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "CP_START_TIMEOUT": str(int(START_TIMEOUT_S))})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until ready (or the script failed)
        if not line.startswith("KUBECONFIG="):
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"control plane did not start: {line}{err[-2000:]}")
        yield Cluster(kubeconfig=line.strip().split("=", 1)[1], kubectl_bin=str(Path(assets) / "kubectl"))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
