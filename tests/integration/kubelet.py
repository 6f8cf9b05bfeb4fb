"""A stand-in for the Job controller and the kubelet against the emulator (``emulator.py``), kept only for
its remaining users (see emulator.py); against the real control plane, ``nodeagent.py`` plays the kubelet.

It watches Jobs (``GET /apis/batch/v1/jobs?watch=true``) and for each unsuspended one does what the
cluster would:

- creates the pod from the Job's template (owner reference to the Job, ``job-name`` labels), binds
  it to a node (``spec.nodeName``, ``PodScheduled``) and starts the container: by default it runs
  the container's command as a local process — the real CPU bench via ``spx run`` — with the pod's
  volumes materialised in a per-pod directory (the downward-API experiment file, emptyDirs) and the
  command's paths rewritten to them, the ``fieldRef`` environment resolved, stdout+stderr captured
  as the pod log (served by the emulator's ``pods/log``) and the termination message read from the
  file at ``terminationMessagePath`` (truncated to 4096 bytes like the kubelet);
- reports the container's end (``terminated``: exit code, reason, message), the pod phase, and the
  Job's conditions: ``Complete``, or ``Failed`` with ``PodFailurePolicy`` (the FailJob rule on
  non-zero exit codes), ``BackoffLimitExceeded`` or ``DeadlineExceeded``;
- honours ``podFailurePolicy``'s Ignore rule for ``DisruptionTarget``: an evicted pod is replaced;
- enforces ``activeDeadlineSeconds`` (scaled by ``time_scale`` so tests need not wait a minute).

Per experiment (label ``bench.spx.dev/experiment``) a :class:`Fault` can be injected: evictions,
an image pull error, an unschedulable pod, a SIGKILL/OOM after N measured points, or a canned bench
(no process: a synthetic but schema-valid result after a delay, for tests that exercise the
operator rather than the bench, and for the scale benchmark).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import string
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from spx.api.result import KernelResult, PointResult, ResultSummary
from spx.api.spec import ExperimentSpec
from spx.api.status import Environment, KernelPoint
from spx.controller.conditions import now_rfc3339

EXPERIMENT_LABEL = "bench.spx.dev/experiment"
EXPERIMENT_ANNOTATION = "bench.spx.dev/experiment"
TERMINATION_LIMIT = 4096

Obj = dict[str, Any]


@dataclass
class Fault:
    """What goes wrong (or how the bench is played) for one experiment's pods."""

    #: Evict the running pod this many times, ``evict_after`` seconds after it starts.
    evict: int = 0
    evict_after: float = 1.0
    #: The container never starts: ``ErrImagePull`` (then ``ImagePullBackOff``) or ``InvalidImageName``.
    image_pull: str | None = None
    #: The scheduler finds no node.
    unschedulable: bool = False
    #: SIGKILL the bench after this many point lines on stdout (exit 137).
    kill_after_points: int | None = None
    #: ... and report it as the OOM killer's doing (reason ``OOMKilled``).
    oom: bool = False
    #: Play the bench instead of running it: ``canned_seconds`` then a synthetic result.
    canned: bool = False
    canned_seconds: float = 1.0
    #: Canned bench outcome: exit code and whether to write a (valid) termination message / result line.
    canned_exit: int = 0
    canned_summary: str | None = "valid"  # "valid", "garbage", None (none written)
    canned_result: bool = True
    #: Seconds between binding the pod and its container running (image pull, container start).
    start_delay: float = 0.0
    #: The Job controller cannot create the pod (quota, webhook, PSA): no pod, a ``FailedCreate``
    #: event on the Job with this message instead, and the Job is left running.
    pod_create_error: str | None = None


# Canned bench output -------------------------------------------------------------------------------


def canned_outputs(experiment_doc: Mapping[str, Any], fault: Fault) -> tuple[str, str | None]:
    """(stdout JSON lines, termination message) of a synthetic run of the experiment.

    Times follow ``replicated = 4 + 0.02·M`` µs and ``split = 9 + 0.02·M/TP + 0.001·M`` µs, so the
    split candidate wins from a few hundred tokens on; every document validates against spx.api.
    """
    spec = ExperimentSpec.model_validate(experiment_doc.get("spec") or {})
    tp = spec.parallelism.tensor_parallel_size
    name = (experiment_doc.get("metadata") or {}).get("name", "canned")
    points: list[PointResult] = []
    kpoints: list[KernelPoint] = []
    lines: list[str] = []
    for m in spec.sweep.tokens:
        padded = -(-m // tp) * tp
        rep = 4.0 + 0.02 * m
        split = 9.0 + 0.02 * m / tp + 0.001 * m
        samples_r = [rep * (1 + 0.01 * ((i % 5) - 2)) for i in range(spec.kernel.samples)]
        samples_s = [split * (1 + 0.01 * ((i % 5) - 2)) for i in range(spec.kernel.samples)]

        def stats(samples: list[float], med: float) -> dict[str, Any]:
            return {"samplesUs": samples, "medianUs": med, "q1Us": med * 0.99, "q3Us": med * 1.01, "iqrPct": 2.0}

        p = PointResult.model_validate({
            "tokens": m, "paddedTokens": padded, "rowsPerRank": padded // tp,
            "replicated": stats(samples_r, rep), "split": stats(samples_s, split),
            "shardGemmUs": split - 5.0, "gatherUs": 5.0, "gatherSource": "measured",
            "maxAbsError": 0.0, "maxAbsReference": 1.0,
        })
        points.append(p)
        kpoints.append(KernelPoint(tokens=m, rows_per_rank=padded // tp, replicated_us=rep, split_us=split,
                                   gather_us=5.0, speedup=rep / split, iqr_pct=2.0, replicated_iqr_pct=2.0,
                                   split_iqr_pct=2.0, max_abs_error=0.0))
        lines.append(json.dumps({"kind": "point", "point": p.to_wire()}))
    env = Environment(gpu="emulated", gpu_count=tp, device="cpu", torch="canned", node=os.environ.get("SPX_NODE_NAME"))
    complete = fault.canned_exit == 0
    result = KernelResult(
        experiment=name, spec=spec, environment=env, world_size=tp, gemm_backend="torch-bf16",
        gather_backend="gloo", gather_source="measured", timer="host", device="cpu", cuda_graphs=False,
        points=points, complete=complete, error=None if complete else "canned failure",
    )
    if fault.canned_result:
        lines.append(json.dumps({"kind": "result", "result": result.to_wire()}))
    summary: str | None = None
    if fault.canned_summary == "valid":
        summary = ResultSummary(points=kpoints, environment=env, world_size=tp, gemm_backend="torch-bf16",
                                gather_source="measured", timer="host", complete=complete,
                                error=None if complete else "canned failure").model_dump_json(by_alias=True, exclude_none=True)
    elif fault.canned_summary == "garbage":
        summary = "Traceback (most recent call last): not a summary"
    return "\n".join(lines) + "\n", summary


# A stand-in vLLM node ------------------------------------------------------------------------------

#: Stand-in ``vllm`` and ``nvidia-smi`` executables (vLLM's CLI and HTTP on loopback, see their docstrings).
STANDINS = Path(__file__).resolve().parent / "standins"


def standin_node_env(pid_dir: Path, **extra: str) -> dict[str, str]:
    """The node environment (:attr:`Kubelet.env`) under which a bench pod's ``spx run --serving`` finds
    the stand-ins as ``vllm`` / ``nvidia-smi``: ``PATH`` first, their interpreter (``python3``) this
    one, the spx plugin aimed at the stand-in attention module, GPU "processes" tracked in ``pid_dir``."""
    return {
        "PATH": os.pathsep.join([str(STANDINS), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "PYTHONPATH": str(STANDINS),
        "SPX_SHARD_FUSED_WQA_WKV_TARGET": "standin_deepseek_attention",
        "STANDIN_PID_DIR": str(pid_dir),
        **extra,
    }


def write_gsm8k(directory: Path, questions: int, annotated: bool = False) -> tuple[Path, Path]:
    """A tiny GSM8K in its own format: ``test.jsonl`` ("What is i plus i+2?", answer 2i+2) and ``train.jsonl``
    (6 few-shot examples "Add i and 1000."). ``annotated``: the answers carry GSM8K's ``<<a+b=c>>``
    calculator annotations and the train answers a thousands separator (``#### 1,000``)."""

    def calc(expr: str, value: int) -> str:
        return f"<<{expr}={value}>>" if annotated else ""

    test, train = directory / "test.jsonl", directory / "train.jsonl"
    test.write_text("".join(
        json.dumps({"question": f"What is {i} plus {i + 2}?",
                    "answer": f"{i}+{i + 2}={calc(f'{i}+{i + 2}', 2 * i + 2)}{2 * i + 2}\n#### {2 * i + 2}"}) + "\n"
        for i in range(questions)))
    train.write_text("".join(
        json.dumps({"question": f"Add {i} and 1000.",
                    "answer": f"{i} + 1000 = {calc(f'{i}+1000', i + 1000)}{i + 1000}\n#### "
                              + (f"{i + 1000:,}" if annotated else f"{i + 1000}")}) + "\n"
        for i in range(6)))
    return test, train


# The driver ----------------------------------------------------------------------------------------


@dataclass
class PodRun:
    namespace: str
    name: str
    dir: Path
    log: Path
    process: asyncio.subprocess.Process | None = None
    started: float = 0.0


@dataclass
class JobState:
    obj: Obj
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    deleted: bool = False
    task: asyncio.Task[None] | None = None


class Kubelet:
    """Plays Job controller + kubelet for every bench Job in the emulator (see the module docstring)."""

    def __init__(self, api_url: str, workdir: Path, *, time_scale: float = 1.0, node: str = "emu-gpu-node-1",
                 default_fault: Fault | None = None, binaries: Mapping[str, list[str]] | None = None,
                 nodes: int | None = None, env: Mapping[str, str] | None = None) -> None:
        self.api = api_url.rstrip("/")
        self.workdir = Path(workdir)
        self.time_scale = time_scale
        self.node = node
        self.default_fault = default_fault or Fault()
        self.faults: dict[str, Fault] = {}
        bindir = Path(sys.executable).parent
        self.binaries = dict(binaries or {"spx": [str(bindir / "spx")]})
        #: The node's environment for the bench processes, over this process' own (e.g. a ``PATH``
        #: that finds stand-in ``vllm`` / ``nvidia-smi`` executables); the container's env goes on top.
        self.env: dict[str, str] = dict(env or {})
        self.jobs: dict[tuple[str, str], JobState] = {}
        self.pods: dict[tuple[str, str], PodRun] = {}
        self.logs: dict[tuple[str, str], str] = {}  # canned pods' logs
        self.pods_created = 0
        self._session: aiohttp.ClientSession | None = None
        self._watch: asyncio.Task[None] | None = None
        self.on_event: Callable[[str, Obj], None] | None = None
        #: With ``nodes``, at most that many pods run at once (one per node, as 8-GPU bench pods
        #: would); the rest stay Pending/Unschedulable until a node frees up.
        self.free_nodes: list[str] | None = [f"{node}-{i}" if i else node for i in range(nodes)] if nodes else None
        self._node_freed = asyncio.Event()
        self.node_count = nodes or 1

    # Lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=None))
        self._watch = asyncio.create_task(self._watch_jobs())

    async def stop(self) -> None:
        if self._watch:
            self._watch.cancel()
        for st in list(self.jobs.values()):
            if st.task:
                st.task.cancel()
        for run in list(self.pods.values()):
            await self._kill(run)
        if self._session:
            await self._session.close()

    def fault_for(self, obj: Mapping[str, Any]) -> Fault:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return self.faults.get(labels.get(EXPERIMENT_LABEL, ""), self.default_fault)

    # HTTP ------------------------------------------------------------------------------------------------

    async def _req(self, method: str, path: str, body: Any = None, ctype: str = "application/merge-patch+json") -> Any:
        assert self._session is not None
        headers = {"Content-Type": ctype if method == "PATCH" else "application/json"}
        async with self._session.request(method, self.api + path, data=None if body is None else json.dumps(body),
                                         headers=headers) as rsp:
            text = await rsp.text()
            if rsp.status >= 400:
                raise RuntimeError(f"{method} {path}: {rsp.status} {text[:300]}")
            return json.loads(text) if text else None

    async def _patch_status(self, kind: str, ns: str, name: str, status: Obj) -> Obj | None:
        path = f"/api/v1/namespaces/{ns}/pods/{name}/status" if kind == "pod" else f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status"
        try:
            return await self._req("PATCH", path, {"status": status})  # type: ignore[no-any-return]
        except RuntimeError as err:
            if " 404 " in str(err):
                return None
            raise

    async def _watch_jobs(self) -> None:
        assert self._session is not None
        rv: str | None = None
        while True:
            params = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
            if rv:
                params["resourceVersion"] = rv
            try:
                async with self._session.get(self.api + "/apis/batch/v1/jobs", params=params) as rsp:
                    async for raw in rsp.content:
                        line = raw.strip()
                        if not line:
                            continue
                        ev = json.loads(line)
                        if ev["type"] == "ERROR":
                            rv = None
                            break
                        rv = ev["object"]["metadata"].get("resourceVersion", rv)
                        if ev["type"] != "BOOKMARK":
                            self._on_job(ev["type"], ev["object"])
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.2)

    def _on_job(self, type_: str, job: Obj) -> None:
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        st = self.jobs.get(key)
        if st is not None and st.obj["metadata"]["uid"] != job["metadata"]["uid"]:
            st.deleted = True
            st.changed.set()
            st = None
        if type_ == "DELETED":
            if st is not None:
                st.deleted = True
                st.changed.set()
                self.jobs.pop(key, None)
            return
        if st is None:
            st = JobState(job)
            self.jobs[key] = st
            st.task = asyncio.create_task(self._run_job(st))
        else:
            st.obj = job
            st.changed.set()

    # The Job controller ---------------------------------------------------------------------------------

    @staticmethod
    def _finished(job: Obj) -> bool:
        return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in (job.get("status") or {}).get("conditions") or [])

    async def _run_job(self, st: JobState) -> None:
        try:
            await self._job_loop(st)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            print(f"kubelet: job {st.obj['metadata']['name']} crashed: {err!r}", file=sys.stderr)
            raise

    async def _wait_change(self, st: JobState, timeout: float | None = None) -> None:
        st.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(st.changed.wait(), timeout)

    async def _job_loop(self, st: JobState) -> None:
        while (st.obj.get("spec") or {}).get("suspend") and not st.deleted:
            await self._wait_change(st)
        if st.deleted or self._finished(st.obj):
            return
        job = st.obj
        ns, jname = job["metadata"]["namespace"], job["metadata"]["name"]
        start = time.monotonic()
        deadline_s = (job.get("spec") or {}).get("activeDeadlineSeconds")
        deadline = start + deadline_s * self.time_scale if deadline_s else None
        started_at = now_rfc3339()
        fault = self.fault_for(job)
        evictions_left = fault.evict
        failed_pods = 0
        if fault.pod_create_error is not None:
            await self._patch_status("job", ns, jname, {"startTime": started_at, "active": 0})
            await self._failed_create(job, fault.pod_create_error)
            await self._idle_until_gone(st, deadline)
            return
        while not st.deleted:
            pod = await self._create_pod(job, started_at)
            outcome, pod_name = await self._run_pod(st, pod, fault, evict=evictions_left > 0, deadline=deadline)
            if outcome == "gone":
                return
            if outcome == "evicted":
                evictions_left -= 1
                failed_pods += 1
                await self._patch_status("job", ns, jname, {"active": 0, "failed": failed_pods})
                continue  # podFailurePolicy: Ignore on DisruptionTarget → a new pod
            conds: list[Obj] = []
            now = now_rfc3339()
            if outcome == "succeeded":
                conds = [
                    {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now},
                    {"type": "Complete", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now},
                ]
                status = {"active": 0, "succeeded": 1, "failed": failed_pods, "completionTime": now, "conditions": conds}
            elif outcome == "deadline":
                conds = [
                    {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "lastTransitionTime": now,
                     "message": "Job was active longer than specified deadline"},
                    {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "lastTransitionTime": now,
                     "message": "Job was active longer than specified deadline"},
                ]
                status = {"active": 0, "failed": failed_pods + 1, "conditions": conds}
            else:  # failed: the FailJob rule on non-zero exit codes matched
                msg = f"Container bench for pod {ns}/{pod_name} failed with exit code {outcome.split(':')[1]} matching FailJob rule at index 1"
                conds = [
                    {"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy", "message": msg, "lastTransitionTime": now},
                    {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": msg, "lastTransitionTime": now},
                ]
                status = {"active": 0, "failed": failed_pods + 1, "conditions": conds}
            await self._patch_status("job", ns, jname, status)
            return

    async def _failed_create(self, job: Obj, message: str) -> None:
        """The Job controller's ``FailedCreate`` event (a core/v1 Event on the Job)."""
        meta = job["metadata"]
        suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=8))
        now = now_rfc3339()
        await self._req("POST", f"/api/v1/namespaces/{meta['namespace']}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{suffix}", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "reason": "FailedCreate", "message": message, "type": "Warning", "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "source": {"component": "job-controller"},
        })

    async def _create_pod(self, job: Obj, started_at: str) -> Obj:
        meta = job["metadata"]
        tmpl = (job.get("spec") or {}).get("template") or {}
        suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{suffix}",
                "namespace": meta["namespace"],
                "labels": dict((tmpl.get("metadata") or {}).get("labels") or {}),
                "annotations": dict((tmpl.get("metadata") or {}).get("annotations") or {}),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": json.loads(json.dumps(tmpl.get("spec") or {})),
        }
        self.pods_created += 1
        created: Obj = await self._req("POST", f"/api/v1/namespaces/{meta['namespace']}/pods", pod)
        await self._patch_status("job", meta["namespace"], meta["name"], {"startTime": started_at, "active": 1})
        return created

    # The kubelet ------------------------------------------------------------------------------------------

    async def _run_pod(self, st: JobState, pod: Obj, fault: Fault, evict: bool, deadline: float | None) -> tuple[str, str]:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        now = now_rfc3339()
        if fault.unschedulable:
            await self._patch_status("pod", ns, name, {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": now,
                 "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available"}]})
            return await self._idle_until_gone(st, deadline), name
        node = await self._bind_node(st, ns, name, deadline)
        if node is None:
            return ("deadline" if deadline is not None and time.monotonic() >= deadline else "gone"), name
        try:
            return await self._run_bound_pod(st, pod, fault, evict, deadline, node)
        finally:
            if self.free_nodes is not None:
                self.free_nodes.append(node)
                self._node_freed.set()

    async def _bind_node(self, st: JobState, ns: str, name: str, deadline: float | None) -> str | None:
        """A free node for the pod (waiting, reported as Unschedulable, while there is none)."""
        if self.free_nodes is None:
            return self.node
        reported = False
        while not self.free_nodes:
            if not reported:
                total = self.node_count
                await self._patch_status("pod", ns, name, {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": now_rfc3339(),
                     "message": f"0/{total} nodes are available: insufficient nvidia.com/gpu"}]})
                reported = True
            self._node_freed.clear()
            freed = asyncio.create_task(self._node_freed.wait())
            changed = asyncio.create_task(self._wait_change(st))
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            await asyncio.wait({freed, changed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            freed.cancel()
            changed.cancel()
            if st.deleted or (deadline is not None and time.monotonic() >= deadline):
                return None
        return self.free_nodes.pop(0)

    async def _run_bound_pod(self, st: JobState, pod: Obj, fault: Fault, evict: bool, deadline: float | None,
                             node: str) -> tuple[str, str]:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        now = now_rfc3339()
        await self._req("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", {"spec": {"nodeName": node}})
        pod = {**pod, "spec": {**pod["spec"], "nodeName": node}}
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
        if fault.image_pull:
            image = pod["spec"]["containers"][0].get("image")
            await self._patch_status("pod", ns, name, {"phase": "Pending", "conditions": [scheduled], "containerStatuses": [
                {"name": "bench", "image": image, "ready": False, "restartCount": 0,
                 "state": {"waiting": {"reason": fault.image_pull, "message": f'Failed to pull image "{image}": not found'}}}]})
            if fault.image_pull == "ErrImagePull":
                await asyncio.sleep(0.5)
                await self._patch_status("pod", ns, name, {"containerStatuses": [
                    {"name": "bench", "image": image, "ready": False, "restartCount": 0,
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}}}]})
            return await self._idle_until_gone(st, deadline), name

        if fault.start_delay:
            await self._patch_status("pod", ns, name, {"phase": "Pending", "conditions": [scheduled]})
            await asyncio.sleep(fault.start_delay)
        run = PodRun(ns, name, self.workdir / "pods" / f"{ns}_{name}", self.workdir / "pods" / f"{ns}_{name}" / "log")
        run.dir.mkdir(parents=True, exist_ok=True)
        self.pods[(ns, name)] = run
        started = now_rfc3339()
        await self._patch_status("pod", ns, name, {"phase": "Running", "conditions": [
            scheduled, {"type": "Initialized", "status": "True", "lastTransitionTime": started},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": started},
            {"type": "Ready", "status": "True", "lastTransitionTime": started}],
            "containerStatuses": [{"name": "bench", "ready": True, "restartCount": 0, "started": True,
                                   "state": {"running": {"startedAt": started}}}]})
        if fault.canned:
            waiter = asyncio.create_task(self._canned(run, pod, fault))
        else:
            waiter = asyncio.create_task(self._process(run, pod, fault))
        timers: list[tuple[str, float]] = []
        if evict:
            timers.append(("evicted", time.monotonic() + fault.evict_after))
        if deadline is not None:
            timers.append(("deadline", deadline))
        try:
            while True:
                if st.deleted:
                    await self._kill(run)
                    waiter.cancel()
                    return "gone", name
                remaining = [(why, t - time.monotonic()) for why, t in timers]
                next_timer = min(remaining, key=lambda r: r[1]) if remaining else None
                changed = asyncio.create_task(self._wait_change(st))
                done, _ = await asyncio.wait({waiter, changed}, timeout=max(0.0, next_timer[1]) if next_timer else None,
                                             return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                if waiter in done:
                    code, message, reason = waiter.result()
                    finished = now_rfc3339()
                    term = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished}
                    if message:
                        term["message"] = message
                    phase = "Succeeded" if code == 0 else "Failed"
                    await self._patch_status("pod", ns, name, {"phase": phase, "conditions": [
                        scheduled, {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished}],
                        "containerStatuses": [{"name": "bench", "ready": False, "restartCount": 0, "started": False,
                                               "state": {"terminated": term}}]})
                    return ("succeeded" if code == 0 else f"failed:{code}"), name
                if st.deleted:
                    continue
                if next_timer is not None and next_timer[1] <= 0:
                    why = next_timer[0]
                    await self._kill(run)
                    waiter.cancel()
                    finished = now_rfc3339()
                    term = {"exitCode": 137, "reason": "Error", "startedAt": started, "finishedAt": finished}
                    status: Obj = {"phase": "Failed", "containerStatuses": [
                        {"name": "bench", "ready": False, "restartCount": 0, "state": {"terminated": term}}]}
                    if why == "evicted":
                        status["conditions"] = [scheduled, {
                            "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                            "message": "Eviction API: evicting", "lastTransitionTime": finished}]
                    else:
                        status["reason"] = "DeadlineExceeded"
                        status["message"] = "Pod was active on the node longer than the specified deadline"
                    await self._patch_status("pod", ns, name, status)
                    return why, name
        finally:
            if not waiter.done():
                waiter.cancel()

    async def _idle_until_gone(self, st: JobState, deadline: float | None) -> str:
        while not st.deleted:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                return "deadline"
            await self._wait_change(st, timeout)
        return "gone"

    def _experiment_doc(self, pod: Obj) -> Obj:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(EXPERIMENT_ANNOTATION) or "{}"
        return json.loads(raw)  # type: ignore[no-any-return]

    async def _canned(self, run: PodRun, pod: Obj, fault: Fault) -> tuple[int, str | None, str]:
        await asyncio.sleep(fault.canned_seconds)
        stdout, summary = canned_outputs(self._experiment_doc(pod), fault)
        self.logs[(run.namespace, run.name)] = "spx run: canned bench\n" + stdout
        return fault.canned_exit, summary, "Completed" if fault.canned_exit == 0 else "Error"

    def _materialise(self, run: PodRun, pod: Obj) -> tuple[list[str], dict[str, str], Path]:
        """Volumes → directories, command paths rewritten, env resolved; returns (argv, env, termination file)."""
        spec = pod["spec"]
        container = spec["containers"][0]
        mounts: dict[str, Path] = {}
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for vm in container.get("volumeMounts") or []:
            local = run.dir / "volumes" / vm["name"]
            local.mkdir(parents=True, exist_ok=True)
            vol = volumes.get(vm["name"], {})
            for item in (vol.get("downwardAPI") or {}).get("items") or []:
                path = item["fieldRef"]["fieldPath"]
                value = ""
                if path.startswith("metadata.annotations['"):
                    key = path[len("metadata.annotations['"):-2]
                    value = (pod["metadata"].get("annotations") or {}).get(key, "")
                elif path == "metadata.name":
                    value = pod["metadata"]["name"]
                (local / item["path"]).write_text(value)
            mounts[vm["mountPath"]] = local
        term_path = container.get("terminationMessagePath") or "/dev/termination-log"
        term_file = run.dir / "termination-log"
        term_file.write_text("")

        def rewrite(arg: str) -> str:
            if arg == term_path:
                return str(term_file)
            for mount, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
                if arg == mount or arg.startswith(mount.rstrip("/") + "/"):
                    return str(local) + arg[len(mount.rstrip("/")):]
            return arg

        argv = [rewrite(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        argv = [*self.binaries.get(argv[0], [argv[0]]), *argv[1:]]
        env = {**os.environ, **self.env}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
            elif ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == "spec.nodeName":
                env[item["name"]] = (pod.get("spec") or {}).get("nodeName") or self.node
        return argv, env, term_file

    async def _process(self, run: PodRun, pod: Obj, fault: Fault) -> tuple[int, str | None, str]:
        argv, env, term_file = self._materialise(run, pod)
        with run.log.open("wb") as log:
            run.process = await asyncio.create_subprocess_exec(
                *argv, stdout=log, stderr=asyncio.subprocess.STDOUT, env=env, cwd=run.dir, start_new_session=True)
        run.started = time.monotonic()
        killed = False
        if fault.kill_after_points is not None:
            while run.process.returncode is None:
                points = sum(1 for line in run.log.read_text(errors="replace").splitlines() if line.startswith('{"kind":"point"'))
                if points >= fault.kill_after_points:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(run.process.pid, signal.SIGKILL)
                    killed = True
                    break
                await asyncio.sleep(0.1)
        code = await run.process.wait()
        if code < 0:  # killed by a signal: the container runtime reports 128 + signal
            code = 128 - code
        message = term_file.read_bytes()[:TERMINATION_LIMIT].decode(errors="replace") or None
        reason = "Completed" if code == 0 else ("OOMKilled" if killed and fault.oom else "Error")
        return code, message, reason

    async def _kill(self, run: PodRun) -> None:
        proc = run.process
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 3)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    # Logs (called by the emulator: the API server proxies pods/log to the kubelet) ---------------------------

    def read_log(self, namespace: str, name: str, params: Mapping[str, str]) -> str | None:
        if (namespace, name) in self.logs:
            return self.logs[(namespace, name)]
        run = self.pods.get((namespace, name))
        if run is None or not run.log.exists():
            return None
        return run.log.read_text(errors="replace")
