"""Two operator replicas with leader election (``SPX_LEADER_ELECTION``, a real coordination.k8s.io Lease)
against the real control plane: the leader is SIGKILLed while an experiment runs; the standby takes
the Lease and finishes it. The experiment is decided once, its one Job is never created twice.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from spx_testing.cluster import Cluster, condition
from spx_testing.controlplane import ControlPlane
from spx_testing.nodeagent import Fault
from spx_testing.specs import CPU_SPEC

pytestmark = pytest.mark.timeout(600)
NS = "leader"
LEASE = "spx-operator-leader"
#: A shortened lease so the failover fits the test (renew deadline 6.7 s, retry 1.3 s), long enough that a
#: loaded machine does not starve the leader past it.
LEASE_SECONDS = 10


def _env(identity: str) -> dict[str, str]:
    return {"SPX_LEADER_ELECTION": "true", "SPX_LEADER_ELECTION_NAMESPACE": NS,
            "SPX_LEADER_ELECTION_IDENTITY": identity, "SPX_LEADER_LEASE_SECONDS": str(LEASE_SECONDS),
            "SPX_MAX_CONCURRENT_EXPERIMENTS": "1"}


@pytest.fixture(scope="module")
def replicas(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict[str, Any]]]:
    c = Cluster(control_plane, NS, tmp_path_factory.mktemp("operator-leader"))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for identity in ("replica-a", "replica-b"):
            c.operator = None  # Cluster runs one operator at a time: keep each process here
            procs[identity] = c.start_operator(env=_env(identity))
            c.wait_operator_ready()
            if identity == "replica-a":  # a leads before b starts
                c.wait_for(lambda: holder(c) == "replica-a", 60, "replica-a holding the Lease")
        yield c, procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        c.operator = None
        c.close()


def holder(c: Cluster) -> str | None:
    lease = c.get("coordination.k8s.io/v1", "leases", LEASE)
    return ((lease or {}).get("spec") or {}).get("holderIdentity")


def test_the_standby_finishes_the_run_after_the_leader_is_killed(replicas: tuple[Cluster, dict[str, Any]]) -> None:
    c, procs = replicas
    assert holder(c) == "replica-a"
    c.agent.faults["ha"] = Fault(replay=True, replay_seconds=25)  # type: ignore[union-attr]
    c.apply("ha", CPU_SPEC)
    c.wait_for(lambda: ((c.exp("ha") or {}).get("status") or {}).get("phase") == "Running", 120, "ha Running")
    assert holder(c) == "replica-a"  # the standby never took over while the leader lived

    procs["replica-a"].send_signal(signal.SIGKILL)  # mid-run, no clean release of the Lease
    procs["replica-a"].wait(10)
    killed = time.monotonic()
    c.wait_for(lambda: holder(c) == "replica-b", 60, "replica-b taking the Lease")
    took = time.monotonic() - killed
    assert took < 4 * LEASE_SECONDS, f"failover took {took:.1f} s"

    obj = c.wait_decided("ha", timeout=180)
    assert obj["status"]["phase"] == "Succeeded", obj["status"].get("message")
    assert c.jobs_created("ha-") == ["ha-g1"]  # created once, by the first leader, adopted by the second
    history = c.history("ha")
    decided = [v for v in history if (condition(v, "Decided") or {}).get("status") == "True"]
    assert decided, "never decided"
    first = decided[0]["status"]
    # decided once: every later version keeps the first decision (same phase, verdict and transition time)
    for v in decided:
        assert v["status"]["phase"] == first["phase"] and v["status"].get("verdict") == first.get("verdict")
        assert condition(v, "Decided")["lastTransitionTime"] == condition(decided[0], "Decided")["lastTransitionTime"]
    lease = c.get("coordination.k8s.io/v1", "leases", LEASE)
    assert lease is not None and lease["spec"]["leaseTransitions"] >= 1
