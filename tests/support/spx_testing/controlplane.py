"""A real Kubernetes control plane on 127.0.0.1 for the tests: etcd, kube-apiserver, kube-controller-manager.

The binaries come from ``KUBEBUILDER_ASSETS`` (controller-runtime's envtest convention: a folder holding
``etcd``, ``kube-apiserver``, ``kube-controller-manager`` and ``kubectl``). Get them with envtest's tool
(``setup-envtest use -p path 1.36``, which prints the folder) or from a Kubernetes release (the server
binaries tarball) plus an etcd release; ``.ci/run`` unpacks the copies kept beside the repository.

:class:`ControlPlane` makes its own certificates with ``openssl`` (a CA, the API server's serving cert,
a client cert the API server presents to kubelets, a serving cert for the test node agent, the
service-account key pair) and an admin token in ``system:masters``; it starts the three processes on
free ports, waits (bounded) for ``/readyz`` and ``/healthz``, writes a kubeconfig, and stops every
process it started by PID, TERM then KILL, in bounded time. Logs stay in ``<dir>/logs``; the pytest
fixture in ``tests/conftest.py`` copies them into the session's tmp dir and prints their tails when
a test failed.

The controller manager runs only the Job controller, the garbage collector and the namespace
controller: there is no kubelet to heartbeat, so the node lifecycle controller would taint the test
node and evict its pods after a grace period. There is no scheduler: the test node agent
(``nodeagent.py``) binds pods itself, as kwok does.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spx_testing.kubeapi import Api, wait_for

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
HOW_TO_GET = (
    "set KUBEBUILDER_ASSETS to a folder holding etcd, kube-apiserver, kube-controller-manager and kubectl: "
    "`KUBEBUILDER_ASSETS=$(setup-envtest use -p path 1.36)` (controller-runtime's setup-envtest, plus kubectl and "
    "kube-controller-manager from the Kubernetes 1.36 server release), or the server binaries of a Kubernetes "
    "release and an etcd release; in this project's CI `.ci/run` unpacks them"
)
#: The CRD as a user installs it.
CRD_FILE = Path(__file__).resolve().parents[3] / "crds" / "shardedprojectionexperiments.yaml"
KCM_CONTROLLERS = "job-controller,garbage-collector-controller,namespace-controller,clusterrole-aggregation-controller"


def missing_assets(assets: str | None) -> str | None:
    """Why the control plane cannot start from ``assets`` (None when it can)."""
    if not assets:
        return "KUBEBUILDER_ASSETS is not set"
    missing = [b for b in BINARIES if not os.access(Path(assets) / b, os.X_OK)]
    if missing:
        return f"KUBEBUILDER_ASSETS={assets} lacks {', '.join(missing)}"
    if shutil.which("openssl") is None:
        return "openssl is not installed (it makes the control plane's certificates)"
    return None


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on loopback (see the module docstring)."""

    assets: Path
    dir: Path
    start_timeout_s: float = 120.0
    apiserver_args: Sequence[str] = ()
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    port: int = 0
    token: str = ""

    @property
    def certs(self) -> Path:
        return self.dir / "certs"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def ca(self) -> Path:
        return self.certs / "ca.crt"

    def kubectl(self) -> str:
        return str(self.assets / "kubectl")

    def ssl_context(self) -> ssl.SSLContext:
        """Client TLS context trusting the control plane's CA."""
        return ssl.create_default_context(cafile=str(self.ca))

    # Certificates ----------------------------------------------------------------------------------------

    def _make_certs(self) -> None:
        c = self.certs
        c.mkdir(parents=True, exist_ok=True)
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "30",
                 "-subj", "/CN=spx-test-ca", cwd=c)

        def signed(name: str, subject: str, ext: str) -> None:
            _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                     "-subj", subject, cwd=c)
            (c / f"{name}.ext").write_text(ext)
            _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                     "-out", f"{name}.crt", "-days", "30", "-extfile", f"{name}.ext", cwd=c)

        serving = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
        signed("apiserver", "/CN=kube-apiserver", serving)
        signed("kubelet", "/CN=spx-test-node", serving)  # the node agent's /containerLogs endpoint
        signed("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
               "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=c)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=c)
        self.token = secrets.token_hex(24)
        (c / "tokens.csv").write_text(f"{self.token},admin,admin-uid,system:masters\n")

    def write_kubeconfig(self, path: Path, server: str | None = None, namespace: str = "default") -> Path:
        """A kubeconfig for the admin token; ``server`` overrides the API server URL (an ``http://`` proxy)."""
        server = server or self.url
        cluster = f"    server: {server}\n"
        if server.startswith("https"):
            cluster += f"    certificate-authority-data: {base64.b64encode(self.ca.read_bytes()).decode()}\n"
        path.write_text(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n" + cluster
            + f"users:\n- name: admin\n  user:\n    token: {self.token}\n"
            + f"contexts:\n- name: local\n  context:\n    cluster: local\n    user: admin\n    namespace: {namespace}\n"
            + "current-context: local\n")
        path.chmod(0o600)
        return path

    # Processes -------------------------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def _wait_ready(self, name: str, url: str, ctx: ssl.SSLContext | None, headers: dict[str, str]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        proc = self.procs[name]
        last = ""
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} while starting:\n{self.log_tail(name)}")
            try:
                req = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(req, timeout=2, context=ctx) as rsp:
                    if rsp.status == 200:
                        return
            except (OSError, urllib.error.URLError) as err:
                last = str(err)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {self.start_timeout_s:.0f}s ({last}):\n{self.log_tail(name)}")
            time.sleep(0.2)

    def start(self) -> ControlPlane:
        """Make certificates, start etcd, kube-apiserver and kube-controller-manager, wait until ready.

        Raises:
            RuntimeError: a process exited or was not ready within ``start_timeout_s`` (with its log tail).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self._make_certs()
        c = self.certs
        try:
            etcd_port, peer_port, self.port, kcm_port = free_port(), free_port(), free_port(), free_port()
            self._spawn("etcd", [
                str(self.assets / "etcd"), "--name=default", f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}", f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync"])
            self._wait_ready("etcd", f"http://127.0.0.1:{etcd_port}/health", None, {})
            self._spawn("kube-apiserver", [
                str(self.assets / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
                "--endpoint-reconciler-type=none", f"--cert-dir={c}",
                f"--tls-cert-file={c / 'apiserver.crt'}", f"--tls-private-key-file={c / 'apiserver.key'}",
                f"--client-ca-file={c / 'ca.crt'}", f"--token-auth-file={c / 'tokens.csv'}", "--authorization-mode=RBAC",
                f"--service-account-issuer=https://127.0.0.1:{self.port}", f"--service-account-key-file={c / 'sa.pub'}",
                f"--service-account-signing-key-file={c / 'sa.key'}", "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true", "--disable-admission-plugins=ServiceAccount",
                # pods/log is proxied to the node's kubelet endpoint: the test node agent, verified by the CA
                f"--kubelet-certificate-authority={c / 'ca.crt'}",
                f"--kubelet-client-certificate={c / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={c / 'apiserver-kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP",
                *self.apiserver_args])
            self._wait_ready("kube-apiserver", f"{self.url}/readyz", self.ssl_context(),
                             {"Authorization": f"Bearer {self.token}"})
            self.write_kubeconfig(self.kubeconfig)
            self._spawn("kube-controller-manager", [
                str(self.assets / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={kcm_port}", "--leader-elect=false",
                "--use-service-account-credentials=false", f"--service-account-private-key-file={c / 'sa.key'}",
                f"--root-ca-file={c / 'ca.crt'}", f"--controllers={KCM_CONTROLLERS}"])
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE  # the controller manager's self-signed health endpoint
            self._wait_ready("kube-controller-manager", f"https://127.0.0.1:{kcm_port}/healthz", insecure, {})
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop every process this object started, newest first: SIGTERM, then SIGKILL after ``timeout_s``."""
        for name in reversed(list(self.procs)):
            proc = self.procs.pop(name)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout_s)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def alive(self) -> list[str]:
        """Names of the processes that are still running."""
        return [n for n, p in self.procs.items() if p.poll() is None]


def install_crd(api: Api, crd: dict[str, Any]) -> list[str]:
    """Server-side apply of ``crd`` (``fieldValidation=Strict``), then wait for ``Established``; the warnings."""
    api.warnings.clear()
    api.apply(crd)
    name = crd["metadata"]["name"]

    def established() -> bool:
        got = api.get("apiextensions.k8s.io/v1", "customresourcedefinitions", None, name) or {}
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in (got.get("status") or {}).get("conditions") or [])

    wait_for(established, 60, f"CRD {name} Established")
    return list(api.warnings)
