"""The container runtime of the test node agent: how a bench pod's container runs on this machine.

Stand-in for a container runtime (none here). :class:`ContainerRuntime` runs the pod's command as a
local process — the real CPU bench via ``spx run`` — with the pod's volumes materialised in a per-pod
directory (the downward-API experiment file, emptyDirs), the command's paths rewritten to them, the
``fieldRef`` environment resolved, stdout+stderr kept as the container log and the termination message
read from ``terminationMessagePath`` (4096 bytes at most, as the kubelet reads it). A *replayed* bench
(:attr:`Fault.replay`) runs the real bench for the first pod of a given experiment spec and replays its
recorded log and termination message for later ones. Also the stand-in vLLM node's environment
(:func:`standin_node_env`) and a tiny GSM8K (:func:`write_gsm8k`). Nothing here imports ``spx``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPERIMENT_ANNOTATION = "bench.spx.dev/experiment"
TERMINATION_LIMIT = 4096

Obj = dict[str, Any]


@dataclass
class Fault:
    """What goes wrong (or how the bench is played) for one experiment's pods."""

    #: Evict the running pod (Eviction API) this many times, ``evict_after`` seconds after it starts.
    evict: int = 0
    evict_after: float = 1.0
    #: The container never starts: ``ErrImagePull`` (then ``ImagePullBackOff``) or ``InvalidImageName``.
    image_pull: str | None = None
    #: The scheduler finds no node.
    unschedulable: bool = False
    #: SIGKILL the bench after this many point lines on stdout (exit 137) ...
    kill_after_points: int | None = None
    #: ... and report it as the OOM killer's doing (reason ``OOMKilled``).
    oom: bool = False
    #: Replay the spec's recorded real run (see the module docstring), taking at least this long.
    replay: bool = False
    replay_seconds: float = 1.0
    #: Replay without the log's ``result`` line / with this termination message instead ("" = none).
    drop_result_line: bool = False
    termination_message: str | None = None
    #: Seconds between binding the pod and its container running (image pull, container start).
    start_delay: float = 0.0
    #: Replay only the first this many point lines, then hang (a rank that never returns) ...
    hang_after_points: int | None = None
    #: ... and when the pod is deleted, in its grace period: write the next point line, then 1 s later a
    #: partial summary to the termination message, and exit 143 (SIGTERM), as the bench does.
    grace_output: bool = False
    #: The node is lost this many seconds after the container starts: its kubelet stops (nothing more
    #: is reported, deletions never finish, logs are unreachable) and the node's ``Ready`` turns
    #: ``Unknown`` (what the node lifecycle controller writes when heartbeats stop).
    lose_node_after: float | None = None


# A stand-in vLLM node ------------------------------------------------------------------------------

#: Stand-in ``vllm`` and ``nvidia-smi`` executables (vLLM's CLI and HTTP on loopback, see their docstrings).
STANDINS = Path(__file__).resolve().parents[2] / "integration" / "standins"


def standin_node_env(pid_dir: Path, **extra: str) -> dict[str, str]:
    """The node environment (:attr:`NodeAgent.env`) under which a bench pod's ``spx run --serving`` finds
    the stand-ins as ``vllm`` / ``nvidia-smi``: ``PATH`` first, their interpreter (``python3``) this
    one, the spx plugin aimed at the stand-in attention module, GPU "processes" tracked in ``pid_dir``."""
    return {
        "PATH": os.pathsep.join([str(STANDINS), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        # the checkout under test first: the pod's spx and the stand-in's plugin/extension are this tree's, not
        # whatever tree the interpreter has installed
        "PYTHONPATH": os.pathsep.join([str(STANDINS), str(STANDINS.parents[2] / "operator")]),
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



@dataclass
class PodRun:
    namespace: str
    name: str
    dir: Path
    log: Path
    obj: Obj
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    gone: bool = False
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None
    node: str | None = None
    #: The container ended (its log is complete); the node was lost (nothing is served any more).
    exited: bool = False
    lost: bool = False



class ContainerRuntime:
    """Runs containers as local processes; ``env`` is the node's environment, ``binaries`` maps a
    command name to the local argv prefix (``spx`` → this virtualenv's ``spx``)."""

    def __init__(self, env: dict[str, str] | None = None, binaries: dict[str, list[str]] | None = None) -> None:
        self.env: dict[str, str] = dict(env or {})
        self.binaries = dict(binaries or {"spx": [str(Path(sys.executable).parent / "spx")]})
        self.recordings: dict[str, tuple[str, str]] = {}  # spec hash → (log, termination message)

    def materialise(self, run: PodRun) -> tuple[list[str], dict[str, str], Path]:
        """Volumes → directories, command paths rewritten, env resolved; returns (argv, env, termination file)."""
        pod = run.obj
        spec = pod["spec"]
        container = spec["containers"][0]
        mounts: dict[str, Path] = {}
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for vm in container.get("volumeMounts") or []:
            local = run.dir / "volumes" / vm["name"]
            local.mkdir(parents=True, exist_ok=True)
            for item in (volumes.get(vm["name"], {}).get("downwardAPI") or {}).get("items") or []:
                fpath = item["fieldRef"]["fieldPath"]
                value = ""
                if fpath.startswith("metadata.annotations['"):
                    value = (pod["metadata"].get("annotations") or {}).get(fpath[len("metadata.annotations['"):-2], "")
                elif fpath == "metadata.name":
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
        fields = {"spec.nodeName": run.node or "", "metadata.name": run.name, "metadata.namespace": run.namespace}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
            elif (ref := ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")) in fields:
                env[item["name"]] = fields[ref]
        return argv, env, term_file

    async def process(self, run: PodRun, fault: Fault) -> tuple[int, str | None, str]:
        argv, env, term_file = self.materialise(run)
        with run.log.open("wb") as log:
            run.process = await asyncio.create_subprocess_exec(
                *argv, stdout=log, stderr=asyncio.subprocess.STDOUT, env=env, cwd=run.dir, start_new_session=True)
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

    @staticmethod
    def spec_key(pod: Obj) -> str:
        doc = json.loads(((pod["metadata"].get("annotations") or {}).get(EXPERIMENT_ANNOTATION)) or "{}")
        spec = {k: v for k, v in (doc.get("spec") or {}).items() if k != "timeoutSeconds"}  # the same bench run
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()

    async def replay(self, run: PodRun, fault: Fault) -> tuple[int, str | None, str]:
        t0 = time.monotonic()
        key = self.spec_key(run.obj)
        if key not in self.recordings:
            code, message, _ = await self.process(run, Fault())
            if code != 0:
                raise RuntimeError(f"the recorded bench run failed (exit {code}):\n{run.log.read_text()[-2000:]}")
            self.recordings[key] = (run.log.read_text(), message or "")
        log, message = self.recordings[key]
        if fault.hang_after_points is not None:
            run.log.write_text(self.log_until_point(log, fault.hang_after_points))
            await asyncio.Event().wait()  # hangs until cancelled (the pod deleted)
        await asyncio.sleep(max(0.0, fault.replay_seconds - (time.monotonic() - t0)))
        if fault.drop_result_line:
            log = "".join(line for line in log.splitlines(keepends=True) if not line.startswith('{"kind":"result"'))
        if fault.termination_message is not None:
            message = fault.termination_message
        run.log.write_text(log)
        return 0, message or None, "Completed"

    @staticmethod
    def log_until_point(log: str, n: int) -> str:
        """The recorded log up to and including its ``n``-th point line."""
        out, seen = [], 0
        for line in log.splitlines(keepends=True):
            if seen >= n:
                break
            out.append(line)
            seen += line.startswith('{"kind":"point"')
        return "".join(out)

    async def grace(self, run: PodRun) -> tuple[int, str | None, str]:
        """SIGTERM to a hung replay (``hang_after_points``): what the bench does in its grace period —
        the next point line, 1 s later a partial summary (``complete: false``) — then exit 1, as ``spx run``
        does on SIGTERM (its error ``interrupted (SIGTERM); all ranks stopped``; exit 1 = failed, partial
        results kept: :mod:`spx.api.exit_codes`)."""
        log, message = self.recordings[self.spec_key(run.obj)]
        n = sum(1 for line in run.log.read_text().splitlines() if line.startswith('{"kind":"point"')) + 1
        with run.log.open("a") as f:
            f.write(self.log_until_point(log, n)[len(self.log_until_point(log, n - 1)):])
        await asyncio.sleep(1.0)
        doc = json.loads(message)
        doc["points"] = (doc.get("points") or [])[:n]
        doc.update(complete=False, error="interrupted (SIGTERM); all ranks stopped")
        return 1, json.dumps(doc, separators=(",", ":"))[:TERMINATION_LIMIT], "Error"

    async def kill(self, run: PodRun) -> None:
        proc = run.process
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
