"""A real Kubernetes control plane for the chart's RBAC, admission-policy and CRD-upgrade tests.

etcd + kube-apiserver + kube-controller-manager (RBAC on, the admin token in ``system:masters``) from
``KUBEBUILDER_ASSETS`` (envtest's layout), started on loopback ports by the test suite's one starter,
``tests/support/spx_testing/controlplane.py`` (:class:`controlplane.ControlPlane`), and stopped by PID at the
end of the session. The chart tests get an instance of their own, not the session's
``control_plane``: the CRD-upgrade test deletes and re-creates the CRD, which would delete every
other module's experiments. Tests that need it skip with a message when the binaries are missing.
Everything goes through the real ``kubectl`` of the same folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
from spx_testing.controlplane import HOW_TO_GET, ControlPlane, missing_assets  # noqa: E402

START_TIMEOUT_S = 180.0


def skip_reason() -> str | None:
    """Why the control plane cannot start here (None when it can), with how to get the binaries."""
    why = missing_assets(os.environ.get("KUBEBUILDER_ASSETS"))
    return f"no Kubernetes control plane: {why}; {HOW_TO_GET}" if why else None


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
        # a CRD just created may have no status.conditions yet, which `kubectl wait` reports as an
        # error instead of waiting: poll the condition instead
        deadline = time.monotonic() + 60
        while True:
            got = json.loads(self.kubectl("get", f"crd/{crd_name}", "-o", "json").stdout)
            if any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (got.get("status") or {}).get("conditions") or []):
                break
            assert time.monotonic() < deadline, f"CRD {crd_name} never became Established"
            time.sleep(0.2)
        # discovery may lag the condition by a moment: wait until kubectl can resolve the resource
        deadline = time.monotonic() + 60
        while self.kubectl("get", crd_name.split(".", 1)[0], "-A", check=False).returncode != 0:
            assert time.monotonic() < deadline, f"{crd_name} never became usable"
            time.sleep(0.2)

    def sa_token(self, namespace: str, name: str) -> str:
        """A token of ServiceAccount ``namespace/name`` from the TokenRequest API."""
        return self.kubectl("create", "token", name, "-n", namespace, "--duration=1h").stdout.strip()


def start(workdir: Path) -> Iterator[Cluster]:
    """Start a control plane under ``workdir``, yield it, stop it (every process it started, by PID).

    Raises:
        RuntimeError: a process exited or was not ready within ``START_TIMEOUT_S`` (with its log tail).
    """
    cp = ControlPlane(Path(os.environ["KUBEBUILDER_ASSETS"]), workdir, start_timeout_s=START_TIMEOUT_S)
    cp.start()
    try:
        yield Cluster(kubeconfig=str(cp.kubeconfig), kubectl_bin=cp.kubectl())
    finally:
        cp.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Operator:
    """A running ``spx operator`` process and its log."""

    proc: subprocess.Popen[bytes]
    log: Path

    def wait(self, what: str, fn: Callable[[], Any], timeout: float) -> Any:
        """Poll ``fn`` until it returns something truthy; fail with the operator's log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = fn()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(f"the operator exited ({self.proc.returncode}) waiting for {what}: "
                                     f"{self.log.read_text()[-3000:]}")
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}; operator log: {self.log.read_text()[-3000:]}")

    def refusals(self) -> list[str]:
        """Log lines with a refused request (HTTP 403)."""
        return [line for line in self.log.read_text().splitlines() if "Forbidden" in line or " 403" in line]


@contextlib.contextmanager
def run_operator(cluster: Cluster, deployment: dict[str, Any], token: str, workdir: Path) -> Iterator[Operator]:
    """Run ``spx operator`` with a rendered Deployment's arguments and environment, logged in with
    ``token`` (a service account's), its endpoints on free loopback ports; stopped at the end."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    server = yaml.safe_load(Path(cluster.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    # the downward API's metadata.name (the leader-election identity): a stand-in pod name, as no pod exists
    fields = {"metadata.name": "spx-operator-under-test"}
    env = {e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
           for e in container["env"]}
    env.update({"SPX_KUBE_SERVER": server, "SPX_KUBE_TOKEN": token, "SPX_KUBE_INSECURE": "1",
                "SPX_METRICS_PORT": str(_free_port()), "PYTHONUNBUFFERED": "1"})
    liveness = _free_port()
    args = [a if not a.startswith("--liveness=") else f"--liveness=http://127.0.0.1:{liveness}/healthz"
            for a in container["args"]]
    log = workdir / "operator.log"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "spx"), *args], stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=HERE.parents[2])
    try:
        yield Operator(proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
