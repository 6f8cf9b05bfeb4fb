"""A test node agent for the real API server: scheduler + kubelet for bench pods, as kwok plays them.

Stand-in for what cannot run here (no container runtime, no GPU, no kubelet): everything else — the
Job controller that creates the pods and writes the Job's conditions (``podFailurePolicy``,
``activeDeadlineSeconds``, ``backoffLimit``), the garbage collector, admission, the Eviction API, the
API server's proxying of ``pods/log`` — is the real control plane's.

What the agent does, all through the real API:

- registers ``Node`` objects (capacity incl. ``nvidia.com/gpu: 8``, ``Ready``, address 127.0.0.1 and
  ``status.daemonEndpoints.kubeletEndpoint.Port`` = the agent's HTTPS port);
- schedules: watches the namespace's pods, binds each unbound one with ``pods/binding`` to a free node
  (one bench pod per node, like 8-GPU pods; none free → ``PodScheduled=False/Unschedulable`` in
  ``pods/status``, as the scheduler writes it);
- runs the container (``containers.py``: the pod's command as a local process, the real CPU bench via
  ``spx run``); its status (``Running``, then ``terminated`` with exit code/reason/message and the
  phase) goes to ``pods/status`` as strategic-merge patches (conditions merge by type, like the kubelet's);
- serves container logs: the kubelet's ``GET /containerLogs/{ns}/{pod}/{container}`` (``limitBytes``,
  ``tailLines``) over HTTPS on 127.0.0.1 with a cert from the control plane's CA, requiring the API
  server's kubelet-client cert; the API server proxies ``pods/log`` here;
- finishes deletions: a bound pod being deleted (the Job controller's deadline, the garbage collector,
  an eviction) has its process killed, its status set terminal (exit 137), then is deleted with grace 0.

Faults per experiment (label ``bench.spx.dev/experiment``), :class:`Fault`: evictions through the real
Eviction API, image pull errors, never schedulable, SIGKILL/OOM after N points, a slow start, and a
*replayed* bench: the first pod of a given experiment spec runs the real bench, later pods of the same
spec replay its recorded log and termination message after ``replay_seconds`` (a real output, without
paying for the bench again), optionally altered (no result line, a garbage termination message).

Nothing here imports ``spx``: the agent sees only what a kubelet sees, the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import ssl
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web

from spx_testing.containers import ContainerRuntime, Fault, PodRun, standin_node_env, write_gsm8k

__all__ = ["Fault", "NodeAgent", "standin_node_env", "write_gsm8k"]

EXPERIMENT_LABEL = "bench.spx.dev/experiment"
SMP = "application/strategic-merge-patch+json"

Obj = dict[str, Any]


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


# The agent -----------------------------------------------------------------------------------------


class NodeAgent(ContainerRuntime):
    """Scheduler + kubelet for the bench pods of one namespace (see the module docstring).

    Runs on an asyncio loop: ``await start()`` / ``await stop()``. ``faults[experiment]`` selects a
    :class:`Fault`; ``default_fault`` applies otherwise. ``nodes`` Node objects are registered; each
    runs one bench pod at a time (a whole 8-GPU node per pod).
    """

    def __init__(self, api_url: str, token: str, ca: Path, serving_cert: tuple[Path, Path], namespace: str,
                 workdir: Path, *, node_prefix: str = "gpu-node", nodes: int = 4,
                 default_fault: Fault | None = None, env: Mapping[str, str] | None = None,
                 binaries: Mapping[str, list[str]] | None = None) -> None:
        self.api = api_url.rstrip("/")
        self.token = token
        self.ca = ca
        self.serving_cert = serving_cert
        self.namespace = namespace
        self.workdir = Path(workdir)
        self.node_names = [f"{node_prefix}-{i}" for i in range(nodes)]
        self.free_nodes = list(self.node_names)
        self._node_freed = asyncio.Event()
        super().__init__(dict(env or {}), dict(binaries) if binaries else None)
        self.default_fault = default_fault or Fault()
        self.faults: dict[str, Fault] = {}
        self.pods: dict[str, PodRun] = {}
        self.evictions: dict[str, int] = {}  # experiment → evictions done
        self.errors: list[str] = []
        self.port = 0
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: aiohttp.web.AppRunner | None = None

    # Lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx), headers={"Authorization": f"Bearer {self.token}"},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        await self._serve_logs()
        for name in self.node_names:
            await self._register_node(name)
        self._tasks.append(asyncio.create_task(self._watch_pods()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for run in list(self.pods.values()):
            if run.task:
                run.task.cancel()
            await self.kill(run)
        for name in self.node_names:
            with contextlib.suppress(Exception):
                await self._req("DELETE", f"/api/v1/nodes/{name}")
        if self._runner:
            await self._runner.cleanup()
        if self._session:
            await self._session.close()

    def fault_for(self, pod: Mapping[str, Any]) -> Fault:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return self.faults.get(labels.get(EXPERIMENT_LABEL, ""), self.default_fault)

    # HTTP ------------------------------------------------------------------------------------------------

    async def _req(self, method: str, path: str, body: Any = None, ctype: str = "application/json",
                   ok404: bool = False) -> Any:
        assert self._session is not None
        headers = {"Content-Type": ctype} if body is not None else {}
        async with self._session.request(method, self.api + path, data=None if body is None else json.dumps(body),
                                         headers=headers) as rsp:
            text = await rsp.text()
            if rsp.status == 404 and ok404:
                return None
            if rsp.status >= 400:
                raise RuntimeError(f"{method} {path}: {rsp.status} {text[:300]}")
            return json.loads(text) if text else None

    def _pod_path(self, name: str, sub: str | None = None) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{name}" + (f"/{sub}" if sub else "")

    async def _status(self, run: PodRun, status: Obj) -> None:
        await self._req("PATCH", self._pod_path(run.name, "status"), {"status": status}, SMP, ok404=True)

    # The node --------------------------------------------------------------------------------------------

    async def _register_node(self, name: str) -> None:
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.compute.major": "9",
                "spx.dev/test-agent": self.namespace}},
        }
        with contextlib.suppress(RuntimeError):
            await self._req("DELETE", f"/api/v1/nodes/{name}")
        await self._req("POST", "/api/v1/nodes", node)
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8", "ephemeral-storage": "1Ti"}
        now = now_rfc3339()
        await self._req("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test node agent",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "nodeInfo": {"machineID": name, "systemUUID": name, "bootID": name, "kernelVersion": "test",
                         "osImage": "spx test node agent", "containerRuntimeVersion": "none://0",
                         "kubeletVersion": "v1.36.2", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64"}}}, SMP)

    # Logs: the kubelet endpoint the API server proxies pods/log to ------------------------------------------

    async def _serve_logs(self) -> None:
        app = aiohttp.web.Application()
        app.router.add_get("/containerLogs/{ns}/{pod}/{container}", self._container_logs)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.ca))
        ctx.load_cert_chain(str(self.serving_cert[0]), str(self.serving_cert[1]))
        ctx.verify_mode = ssl.CERT_REQUIRED  # only the API server's kubelet-client cert gets in
        self._runner = aiohttp.web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _container_logs(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["pod"]
        run = self.pods.get(name)
        if run is not None and run.lost:
            assert request.transport is not None
            request.transport.close()  # the node is gone: no answer
            raise asyncio.CancelledError
        if ns != self.namespace or run is None or not run.log.exists():
            return aiohttp.web.Response(status=404, text=f"no log for {ns}/{name}")
        if request.query.get("follow") in ("true", "1"):
            return await self._follow_log(request, run)
        data = run.log.read_bytes()
        if "tailLines" in request.query:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(request.query["tailLines"]):])
        if "limitBytes" in request.query:
            data = data[: int(request.query["limitBytes"])]
        return aiohttp.web.Response(body=data, content_type="text/plain")

    async def _follow_log(self, request: aiohttp.web.Request, run: PodRun) -> aiohttp.web.StreamResponse:
        """``follow=true``: the log so far, then what the container appends, until it exits (as the
        kubelet streams it); the connection is dropped if the node is lost."""
        rsp = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
        await rsp.prepare(request)
        sent = 0
        while True:
            if run.lost:
                assert request.transport is not None
                request.transport.close()
                return rsp
            exited = run.exited
            data = run.log.read_bytes()
            if len(data) > sent:
                await rsp.write(data[sent:])
                sent = len(data)
            if exited:
                await rsp.write_eof()
                return rsp
            await asyncio.sleep(0.2)

    # Watching pods -----------------------------------------------------------------------------------------

    async def _watch_pods(self) -> None:
        assert self._session is not None
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    listing = await self._req("GET", base)
                    rv = listing["metadata"]["resourceVersion"]
                    for pod in listing["items"]:
                        self._on_pod("ADDED", pod)
                params = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "60", "resourceVersion": rv}
                async with self._session.get(self.api + base, params=params) as rsp:
                    async for raw in rsp.content:
                        if not raw.strip():
                            continue
                        ev = json.loads(raw)
                        if ev["type"] == "ERROR":
                            rv = None
                            break
                        rv = ev["object"]["metadata"]["resourceVersion"]
                        if ev["type"] != "BOOKMARK":
                            self._on_pod(ev["type"], ev["object"])
            except asyncio.CancelledError:
                raise
            except (TimeoutError, aiohttp.ClientError, RuntimeError) as err:
                self.errors.append(f"watch: {err!r}")
                await asyncio.sleep(0.5)

    def _on_pod(self, type_: str, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        run = self.pods.get(name)
        if run is not None and run.obj["metadata"]["uid"] != pod["metadata"]["uid"]:
            run.gone = True
            run.changed.set()
            run = None
        if type_ == "DELETED":
            if run is not None:
                run.gone = True
                run.changed.set()
            return
        if run is None:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or pod["spec"].get("nodeName"):
                if pod["metadata"].get("deletionTimestamp") and pod["spec"].get("nodeName") in self.node_names:
                    asyncio.create_task(self._finish_delete(name, pod["metadata"]["uid"]))
                return  # not ours to start (a pod from before this agent, or one it already ran)
            d = self.workdir / "pods" / name
            run = PodRun(self.namespace, name, d, d / "log", pod)
            self.pods[name] = run
            run.task = asyncio.create_task(self._guarded(run))
        else:
            run.obj = pod
            run.changed.set()

    async def _guarded(self, run: PodRun) -> None:
        try:
            await self._lifecycle(run)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # kept for the test's failure message
            self.errors.append(f"pod {run.name}: {err!r}")
            print(f"node agent: pod {run.name} crashed: {err!r}", file=sys.stderr)
        finally:
            self._release(run)

    def _release(self, run: PodRun) -> None:
        if run.node is not None:
            self.free_nodes.append(run.node)
            run.node = None
            self._node_freed.set()

    @staticmethod
    def _deleting(run: PodRun) -> bool:
        return run.gone or bool(run.obj["metadata"].get("deletionTimestamp"))

    async def _wait_change(self, run: PodRun, timeout: float | None = None) -> None:
        """Wait for a pod event since the last wake-up (or ``timeout``): callers re-check ``run.obj``
        after it returns, so an event that arrives between their check and this wait is not lost."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.changed.wait(), timeout)
        run.changed.clear()

    async def _until_deleted(self, run: PodRun) -> None:
        while not self._deleting(run):
            await self._wait_change(run)

    async def _finish_delete(self, name: str, uid: str) -> None:
        """The kubelet's last step: the containers are gone, delete the pod object for good."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            await self._req("DELETE", self._pod_path(name), body, ok404=True)
        except RuntimeError as err:
            if " 409 " not in str(err):  # a newer pod of that name: not ours to delete
                raise

    # One pod ------------------------------------------------------------------------------------------------

    async def _lifecycle(self, run: PodRun) -> None:
        fault = self.fault_for(run.obj)
        if fault.unschedulable:
            await self._status(run, {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": now_rfc3339(),
                 "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available"}]})
            await self._until_deleted(run)
            return
        if not await self._schedule(run):
            return
        await self._req("POST", self._pod_path(run.name, "binding"), {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": run.name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": run.node}})
        await self._run_bound(run, fault)
        if run.lost:
            run.node = None  # the node is gone: nothing more happens here, and nothing is scheduled on it
            return
        self._release(run)  # a terminal pod holds no resources
        if not run.gone:
            await self._finish_delete_when_asked(run)

    async def _schedule(self, run: PodRun) -> bool:
        """Take a free node (reporting Unschedulable while there is none); False if the pod went away."""
        reported = False
        while not self.free_nodes:
            if not reported:
                await self._status(run, {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": now_rfc3339(),
                     "message": f"0/{len(self.node_names)} nodes are available: insufficient nvidia.com/gpu"}]})
                reported = True
            self._node_freed.clear()
            freed = asyncio.create_task(self._node_freed.wait())
            changed = asyncio.create_task(self._wait_change(run))
            await asyncio.wait({freed, changed}, return_when=asyncio.FIRST_COMPLETED)
            freed.cancel()
            changed.cancel()
            if self._deleting(run):
                return False
        if self._deleting(run):
            return False
        run.node = self.free_nodes.pop(0)
        return True

    async def _finish_delete_when_asked(self, run: PodRun) -> None:
        await self._until_deleted(run)
        if not run.gone:
            await self._finish_delete(run.name, run.obj["metadata"]["uid"])

    async def _run_bound(self, run: PodRun, fault: Fault) -> None:
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}
        container = run.obj["spec"]["containers"][0]
        image = container.get("image")
        if fault.image_pull:
            await self._status(run, {"phase": "Pending", "conditions": [scheduled], "containerStatuses": [
                {"name": container["name"], "image": image, "imageID": "", "ready": False, "restartCount": 0,
                 "state": {"waiting": {"reason": fault.image_pull, "message": f'Failed to pull image "{image}": not found'}}}]})
            if fault.image_pull == "ErrImagePull":
                await self._wait_change(run, 0.5)
                await self._status(run, {"containerStatuses": [
                    {"name": container["name"], "image": image, "imageID": "", "ready": False, "restartCount": 0,
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}}}]})
            await self._until_deleted(run)
            await self._terminate(run, None, started=None)
            return
        if fault.start_delay:
            await self._status(run, {"phase": "Pending", "conditions": [scheduled]})
            await self._wait_change(run, fault.start_delay)
        if self._deleting(run):
            await self._terminate(run, None, started=None)
            return
        run.dir.mkdir(parents=True, exist_ok=True)
        run.log.write_bytes(b"")
        started = now_rfc3339()
        await self._status(run, {"phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": started,
                                 "conditions": [scheduled,
                                                {"type": "Initialized", "status": "True", "lastTransitionTime": started},
                                                {"type": "ContainersReady", "status": "True", "lastTransitionTime": started},
                                                {"type": "Ready", "status": "True", "lastTransitionTime": started}],
                                 "containerStatuses": [{"name": container["name"], "image": image, "imageID": f"test://{image}",
                                                        "containerID": f"test://{run.name}", "ready": True, "restartCount": 0,
                                                        "started": True, "state": {"running": {"startedAt": started}}}]})
        waiter = asyncio.create_task(self.replay(run, fault) if fault.replay else self.process(run, fault))
        exp = (run.obj["metadata"].get("labels") or {}).get(EXPERIMENT_LABEL, "")
        evict_at = None
        if self.evictions.get(exp, 0) < fault.evict:
            evict_at = time.monotonic() + fault.evict_after
        lose_at = None if fault.lose_node_after is None else time.monotonic() + fault.lose_node_after
        try:
            while True:
                if lose_at is not None and time.monotonic() >= lose_at:
                    await self._lose_node(run)
                    return
                if self._deleting(run):
                    waiter.cancel()
                    if (fault.grace_output and fault.hang_after_points is not None and not run.gone
                            and self.spec_key(run.obj) in self.recordings):
                        outcome = await self.grace(run)
                    else:
                        await self.kill(run)
                        outcome = (137, None, "Error")
                    await self._terminate(run, outcome, started)
                    return
                deadlines = [t for t in (evict_at, lose_at) if t is not None]
                timeout = None if not deadlines else max(0.0, min(deadlines) - time.monotonic())
                changed = asyncio.create_task(self._wait_change(run))
                done, _ = await asyncio.wait({waiter, changed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                if waiter in done:
                    await self._terminate(run, waiter.result(), started)
                    return
                if evict_at is not None and time.monotonic() >= evict_at:
                    evict_at = None
                    self.evictions[exp] = self.evictions.get(exp, 0) + 1
                    await self._req("POST", self._pod_path(run.name, "eviction"), {
                        "apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": run.name, "namespace": self.namespace}})
        finally:
            if not waiter.done():
                waiter.cancel()

    async def _lose_node(self, run: PodRun) -> None:
        """The node of ``run`` is lost: its kubelet stops (the process dies with it, nothing more is
        written about the pod) and its ``Ready`` condition turns ``Unknown``."""
        run.lost = True
        await self.kill(run)
        now = now_rfc3339()
        await self._req("PATCH", f"/api/v1/nodes/{run.node}/status", {"status": {"conditions": [
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
             "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": now,
             "lastTransitionTime": now}]}}, SMP)

    async def _terminate(self, run: PodRun, outcome: tuple[int, str | None, str] | None, started: str | None) -> None:
        """Write the container's end and the terminal phase (``outcome`` None: the container never ran)."""
        run.exited = True
        finished = now_rfc3339()
        container = run.obj["spec"]["containers"][0]
        code, message, reason = outcome or (137, None, "ContainerStatusUnknown")
        term: Obj = {"exitCode": code, "reason": reason, "finishedAt": finished}
        if started:
            term["startedAt"] = started
        if message:
            term["message"] = message
        await self._status(run, {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished},
                           {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished}],
            "containerStatuses": [{"name": container["name"], "image": container.get("image"), "imageID": "",
                                   "ready": False, "restartCount": 0, "started": False, "state": {"terminated": term}}]})

    # The container ------------------------------------------------------------------------------------------

