"""The real control plane for the operator benchmarks (operator_scale.py, operator_conflict_storm.py).

Starts etcd + kube-apiserver + kube-controller-manager from ``KUBEBUILDER_ASSETS`` (the test suite's
``tests/support/spx_testing/controlplane.py``), installs the CRD from ``crds/`` with server-side apply, and
gives a :class:`cluster.Cluster`: a namespace, the test node agent (``tests/support/spx_testing/nodeagent.py``,
the stand-in kubelet: no container runtime or GPU here) and the real operator as a subprocess.

Every pod replays one real CPU bench run (the node agent's ``replay`` mode: the recorded log and
termination message of a real ``spx run``, after ``replay_seconds``): :func:`prime` runs that one
real bench first, through the operator, so the benchmark's pods cost no bench process each.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # spx_testing; pytest adds it through its pythonpath setting

from spx_testing.cluster import EXP_API, EXP_PLURAL, Cluster, condition, experiment  # noqa: E402
from spx_testing.controlplane import CRD_FILE, HOW_TO_GET, ControlPlane, install_crd, missing_assets  # noqa: E402
from spx_testing.faultproxy import FaultProxy, Rule  # noqa: E402
from spx_testing.kubeapi import Api  # noqa: E402
from spx_testing.nodeagent import Fault  # noqa: E402
from spx_testing.specs import CPU_SPEC  # noqa: E402

__all__ = ["EXP_API", "EXP_PLURAL", "SPEC", "Cluster", "ControlPlane", "FaultProxy", "Rule", "condition", "experiment",
           "namespace_cluster", "prime", "start_control_plane"]

#: The spec every benchmark experiment has: the small CPU run of the operator tests (its real bench
#: runs once, in :func:`prime`; every other pod replays it).
SPEC: dict[str, Any] = CPU_SPEC


def start_control_plane(workdir: Path, audit_log: Path | None = None) -> ControlPlane:
    """Start the control plane under ``workdir`` and install the CRD; SIGTERM then raises SystemExit, so
    that the caller's ``finally`` stops the operator and the control plane (no orphaned processes).
    With ``audit_log``, kube-apiserver writes every request there (audit policy level Metadata, JSON
    lines, batched: complete once the API server has stopped) — who, what, and when it was received and
    answered, in µs (``benchmarks/operator_scale.py`` reads create → Job from it).

    Raises:
        SystemExit: ``KUBEBUILDER_ASSETS`` is unset or lacks a binary (the message says how to get them).
    """
    why = missing_assets(os.environ.get("KUBEBUILDER_ASSETS"))
    if why:
        raise SystemExit(f"no Kubernetes control plane: {why}; {HOW_TO_GET}")
    args: list[str] = []
    if audit_log is not None:  # every request at Metadata level: who, what, and when (µs) it was received and answered
        policy = workdir / "audit-policy.yaml"
        policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
                          "rules:\n- level: Metadata\n")
        args = [f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}", "--audit-log-format=json",
                "--audit-log-mode=batch"]
    cp = ControlPlane(Path(os.environ["KUBEBUILDER_ASSETS"]), workdir / "control-plane", apiserver_args=args)

    def on_term(signum: int, frame: Any) -> None:  # `timeout`: unwind, so that the callers' finally stops it all
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    cp.start()
    try:
        install_crd(Api(cp.url, cp.token, cp.ssl_context()), yaml.safe_load(CRD_FILE.read_text()))
    except BaseException:
        cp.stop()
        raise
    return cp


def namespace_cluster(cp: ControlPlane, namespace: str, workdir: Path, *, nodes: int, replay_seconds: float,
            pod_start_seconds: float) -> Cluster:
    """A namespace with a node agent of ``nodes`` 8-GPU nodes whose pods replay the primed bench."""
    return Cluster(cp, namespace, workdir / namespace, nodes=nodes,
                   default_fault=Fault(replay=True, replay_seconds=replay_seconds, start_delay=pod_start_seconds))


def prime(c: Cluster, name: str = "prime", timeout: float = 600.0) -> float:
    """Run one experiment of :data:`SPEC` through the operator (its pod runs the real CPU bench, which the
    node agent records); the seconds it took. Raises AssertionError if it does not succeed in ``timeout``."""
    t0 = time.monotonic()
    c.apply(name, SPEC)
    obj = c.wait_decided(name, timeout=timeout)
    assert obj["status"]["phase"] == "Succeeded", obj["status"].get("message")
    return time.monotonic() - t0
