"""One test module's view of the real control plane: its namespace, a node agent, the operator process.

:class:`Cluster` takes the session's :class:`controlplane.ControlPlane`, creates a namespace, starts a
:class:`nodeagent.NodeAgent` for it on an event loop in a daemon thread, records every experiment and
Job event of the namespace (:class:`kubeapi.Recorder`), and starts/stops the real operator as a
subprocess (``python -m kopf run -m spx.controller --standalone -n NS``) logged in through a
kubeconfig — the API server's own, or one that points at a :class:`faultproxy.FaultProxy`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from spx_testing.controlplane import ControlPlane, free_port
from spx_testing.kubeapi import Api, ApiProblem, Recorder, path, wait_for
from spx_testing.nodeagent import NodeAgent

REPO = Path(__file__).resolve().parents[3]
EXP_API = "bench.spx.dev/v1alpha1"
EXP_PLURAL = "shardedprojectionexperiments"
EXP_KIND = "ShardedProjectionExperiment"

Obj = dict[str, Any]

__all__ = ["EXP_API", "EXP_PLURAL", "ApiProblem", "Cluster", "condition", "experiment", "free_port", "path"]


def experiment(name: str, spec: Mapping[str, Any], namespace: str, labels: Mapping[str, str] | None = None) -> Obj:
    return {"apiVersion": EXP_API, "kind": EXP_KIND,
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "spec": dict(spec)}


def condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c  # type: ignore[no-any-return]
    return None


class Cluster:
    """A namespace on the real control plane with a node agent and the operator (see the module docstring)."""

    def __init__(self, cp: ControlPlane, namespace: str, workdir: Path, *, agent: bool = True,
                 **agent_kw: Any) -> None:
        self.cp = cp
        self.ns = namespace
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.api = Api(cp.url, cp.token, cp.ssl_context())
        self.api.create("v1", "namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        wait_for(lambda: self.api.list("v1", "serviceaccounts", namespace) or True, 30, "the namespace")
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"agent {namespace}", daemon=True)
        self._thread.start()
        self.agent: NodeAgent | None = None
        if agent:
            c = cp.certs
            self.agent = NodeAgent(cp.url, cp.token, cp.ca, (c / "kubelet.crt", c / "kubelet.key"), namespace,
                                   self.workdir, node_prefix=f"{namespace}-node", **agent_kw)
            self.call(self.agent.start)
        self.experiments = Recorder(self.api, EXP_API, EXP_PLURAL, namespace)
        self.jobs = Recorder(self.api, "batch/v1", "jobs", namespace)
        self.configmaps = Recorder(self.api, "v1", "configmaps", namespace)
        self.operator: subprocess.Popen[bytes] | None = None
        self.operator_logs: list[Path] = []
        self.metrics_port = 0
        self.liveness_port = 0
        self.kubeconfig = cp.write_kubeconfig(self.workdir / "kubeconfig", namespace=namespace)

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 60) -> Any:
        """Run a coroutine function (or a plain function) on the agent's loop and wait for it."""
        async def wrapper() -> Any:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(timeout)

    # API shorthands -----------------------------------------------------------------------------------------

    def get(self, api_version: str, plural: str, name: str) -> Obj | None:
        return self.api.get(api_version, plural, self.ns, name)

    def list(self, api_version: str, plural: str, selector: str | None = None) -> list[Obj]:
        return self.api.list(api_version, plural, self.ns, selector)

    def patch(self, api_version: str, plural: str, name: str, body: Any, sub: str | None = None,
              content_type: str = "application/merge-patch+json") -> Obj:
        return self.api.patch(api_version, plural, self.ns, name, body, content_type, sub)

    def delete(self, api_version: str, plural: str, name: str, propagation: str = "Background") -> Obj:
        return self.api.delete(api_version, plural, self.ns, name, propagation)

    def apply(self, name: str, spec: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> Obj:
        return self.api.create(EXP_API, EXP_PLURAL, self.ns, experiment(name, spec, self.ns, labels))

    def exp(self, name: str) -> Obj | None:
        return self.get(EXP_API, EXP_PLURAL, name)

    def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
        """Poll until truthy; fails early if the operator exits, with its log tail and the agent's errors."""
        def check() -> Any:
            crashed = [e for e in (self.agent.errors if self.agent else []) if e.startswith("pod ")]
            if crashed:
                raise AssertionError(f"the node agent failed while waiting for {what}: {crashed}\n{self.context()}")
            if self.operator is not None and self.operator.poll() is not None:
                raise AssertionError(f"the operator exited ({self.operator.returncode}) while waiting for {what}\n"
                                     f"{self.operator_log_tail()}")
            return predicate()

        return wait_for(check, timeout, what, interval, context=self.context)

    def context(self) -> str:
        errors = "\n".join(self.agent.errors[-10:]) if self.agent else ""
        return f"--- operator log tail\n{self.operator_log_tail()}\n--- node agent errors\n{errors}"

    def wait_decided(self, name: str, timeout: float = 120) -> Obj:
        """Wait until ``Decided=True`` for the current generation (what ``kubectl wait`` would do)."""
        def decided() -> Obj | None:
            obj = self.exp(name)
            cond = condition(obj, "Decided")
            gen = (obj or {}).get("metadata", {}).get("generation")
            if cond and cond["status"] == "True" and cond.get("observedGeneration") == gen:
                return obj
            return None

        return self.wait_for(decided, timeout, f"Decided=True on {self.ns}/{name}")  # type: ignore[no-any-return]

    def wait_phase(self, name: str, phases: set[str], timeout: float = 60) -> Obj:
        return self.wait_for(  # type: ignore[no-any-return]
            lambda: (o := self.exp(name)) and (o.get("status") or {}).get("phase") in phases and o,
            timeout, f"{self.ns}/{name} in phase {sorted(phases)}")

    def history(self, name: str, timeout: float = 60) -> list[Obj]:
        """Every version of the experiment the API server stored since this module started, oldest first, up to
        at least the version it holds now: the watch behind it lags a GET (a test that read the history right
        after ``wait_decided`` returned the decided object once found no decided version in it, issue 37), so
        this waits until the watch has delivered the version a GET returns now."""
        self._caught_up(self.experiments, [self.exp(name)], timeout, f"the watch of {self.ns}/{name}")
        return self.experiments.versions(name)

    def _caught_up(self, recorder: Recorder, objs: list[Obj | None], timeout: float, what: str) -> None:
        """Wait until ``recorder`` has delivered the version of each of ``objs`` (as read by a GET just before)."""
        metas = [o["metadata"] for o in objs if o]
        self.wait_for(lambda: all(recorder.has_seen(m["uid"], m["resourceVersion"]) for m in metas), timeout,
                      f"{what} to deliver the version a GET returns", interval=0.05)

    def events(self, name: str) -> list[Obj]:
        return [e for e in self.list("v1", "events") if e["involvedObject"].get("name") == name]

    def jobs_created(self, prefix: str, timeout: float = 60) -> list[str]:
        """Names of every Job created in the namespace whose name starts with ``prefix``, in creation order (the
        watch caught up first with every such Job a list returns now, as :meth:`history`)."""
        live = [j for j in self.list("batch/v1", "jobs") if j["metadata"]["name"].startswith(prefix)]
        self._caught_up(self.jobs, live, timeout, "the watch of Jobs")
        return self.jobs.created(prefix)

    def owned_by(self, uid: str) -> list[tuple[str, str]]:
        """(kind, name) of every live Job, pod and ConfigMap owned by ``uid``, directly or through a Job."""
        found, owners = [], {uid}
        # list items carry no kind on the real server
        for api_version, plural, kind in (("batch/v1", "jobs", "Job"), ("v1", "pods", "Pod"), ("v1", "configmaps", "ConfigMap")):
            for obj in self.list(api_version, plural):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") in owners for r in refs):
                    owners.add(obj["metadata"]["uid"])
                    found.append((kind, obj["metadata"]["name"]))
        return found

    # The operator process ---------------------------------------------------------------------------------

    def start_operator(self, env: Mapping[str, str] | None = None, kubeconfig: Path | None = None) -> subprocess.Popen[bytes]:
        assert self.operator is None or self.operator.poll() is not None, "the operator is already running"
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SPX_KUBE_", "KUBERNETES_SERVICE"))}
        full_env = {
            **base,
            "KUBECONFIG": str(kubeconfig or self.kubeconfig),
            "SPX_METRICS_PORT": str(self.metrics_port),
            "SPX_WATCH_SERVER_TIMEOUT": "120",
            "SPX_WATCH_INACTIVITY_TIMEOUT": "60",
            "PYTHONUNBUFFERED": "1",
            # kopf's -n scopes kopf's watches; the reactor's own re-lists read SPX_WATCH_NAMESPACES (as
            # `spx operator -n` sets it): without it they would see every other module's experiments
            "SPX_WATCH_NAMESPACES": self.ns,
            **(env or {}),
        }
        args = [sys.executable, "-m", "kopf", "run", "-m", "spx.controller", "--standalone", "--log-format=json",
                f"--liveness=http://127.0.0.1:{self.liveness_port}/healthz", "-n", self.ns]
        log = self.workdir / f"operator-{len(self.operator_logs) + 1}.log"
        self.operator_logs.append(log)
        self.operator = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=full_env, cwd=REPO)
        return self.operator

    def wait_operator_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2) as rsp:
                    return rsp.status == 200
            except OSError:
                return False

        self.wait_for(ready, timeout, "the operator's liveness endpoint")

    def stop_operator(self, kill: bool = False, timeout: float = 30) -> int | None:
        proc = self.operator
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)

    def operator_log_tail(self, n: int = 40) -> str:
        if not self.operator_logs:
            return ""
        lines = self.operator_logs[-1].read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as rsp:
            return str(rsp.read().decode())

    def metric_samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        """(labels, value) of every sample named ``name`` on the operator's /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        return [(dict(s.labels), s.value) for fam in text_string_to_metric_families(self.metrics_text())
                for s in fam.samples if s.name == name]

    def close(self) -> None:
        self.stop_operator()
        self.experiments.stop()
        self.jobs.stop()
        self.configmaps.stop()
        if self.agent is not None:
            try:
                self.call(self.agent.stop, timeout=30)
            except Exception as err:  # teardown goes on; the error is shown
                print(f"node agent stop: {err!r}", file=sys.stderr)
        self.call(_cancel_pending, timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


async def _cancel_pending() -> None:
    """Cancel what is left on the agent's loop (waits of pods that never ended) before it stops."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
