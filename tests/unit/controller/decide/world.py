"""Plain-data builders for the decision-step tests: experiments' Jobs and pods as the API server
returns them, bench outputs written with the real wire module, and a pure driver that answers the
decision step's questions the way the reactor would (from a scripted API server)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field, replace
from typing import Any

from spx.analysis.summary import point_from_result
from spx.api import wire
from spx.api.loading import validate_spec
from spx.api.result import KernelResult, PointResult, ResultSummary
from spx.api.status import Environment, ExperimentStatus
from spx.controller.decide import conclusion as c
from spx.controller.decide import decision as dec
from spx.controller.manifests.naming import job_name
from spx_testing.factories import point_result
from spx_testing.specs import CPU_SPEC  # the one small CPU spec of the operator tests

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
UID = "0000-exp-uid"
NAME, NS = "ds", "ml"
SPEC = validate_spec(CPU_SPEC)
JOB = job_name(NAME, 1)


def ts(seconds: float) -> str:
    """RFC 3339 of T0 + seconds."""
    return (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(type_: str, status: str = "True", reason: str = "", message: str = "", at: float = 0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": ts(at)}


def job(*conditions: dict[str, Any], suspend: bool = False, created: float = 0, deadline: int = 3600,
        start: float | None = 0) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if start is not None and not suspend:
        status["startTime"] = ts(start)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": JOB, "namespace": NS, "uid": "job-uid", "creationTimestamp": ts(created),
                     "labels": {"bench.spx.dev/generation": "1"},
                     "ownerReferences": [{"kind": "ShardedProjectionExperiment", "uid": UID, "controller": True}]},
        "spec": {"suspend": suspend, "activeDeadlineSeconds": deadline},
        "status": status,
    }


def pod(phase: str, node: str | None = "gpu-1", *, running: bool = False, exit_code: int | None = None,
        message: str | None = None, conditions: tuple[dict[str, Any], ...] = (), deleting: bool = False,
        reason: str | None = None, waiting: str | None = None, name: str = f"{JOB}-abcde") -> dict[str, Any]:
    state: dict[str, Any] = {}
    if running:
        state = {"running": {"startedAt": ts(10)}}
    elif exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                **({"message": message} if message is not None else {})}}
    elif waiting:
        state = {"waiting": {"reason": waiting}}
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"{name}-uid", "creationTimestamp": ts(1),
                            "labels": {"job-name": JOB}, "ownerReferences": [{"kind": "Job", "uid": "job-uid"}]}
    if deleting:
        meta["deletionTimestamp"] = ts(100)
    status: dict[str, Any] = {"phase": phase, "conditions": list(conditions),
                              "containerStatuses": [{"name": "bench", "state": state}] if state else []}
    if reason:
        status["reason"] = reason
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": status}


def _point(m: int, tp: int = 2) -> PointResult:
    """A CPU-sized measured point (replicated 4 + 0.02·M µs, split 9 + 0.02·M/TP + 0.001·M, 5 µs gather)."""
    rep, split = 4.0 + 0.02 * m, 9.0 + 0.02 * m / tp + 0.001 * m
    spread = (0.99, 0.995, 1.0, 1.005, 1.01)
    return point_result(m, [rep * f for f in spread], [split * f for f in spread], tp=tp, max_abs_error=0.0,
                        shard_gemm_us=split - 5.0, gather_us=5.0, max_abs_reference=1.0)


def bench_outputs(tokens: tuple[int, ...] = (8, 128, 2048), result: bool = True) -> tuple[str, str]:
    """(log, termination message) of a run that measured ``tokens``, written by :mod:`spx.api.wire`."""
    points = [_point(m) for m in tokens]
    lines = [wire.line("point", p.to_wire()) for p in points]
    kr = KernelResult(experiment=NAME, spec=SPEC, environment=Environment(gpu="cpu", device="cpu"), world_size=2,
                      gemm_backend="torch-bf16", gather_backend="gloo", gather_source="measured", timer="host",
                      device="cpu", cuda_graphs=False, points=points)
    if result:
        lines.append(wire.line("result", kr.to_wire()))
    # one summary point per measured point, as the bench converts them (repeated counts kept)
    summary = ResultSummary(points=[point_from_result(p) for p in points], environment=kr.environment,
                            world_size=2, gemm_backend="torch-bf16", gather_source="measured", timer="host")
    return "".join(lines), wire.dumps(summary.to_wire())


def python_json_line(kind: str, payload: Any) -> str:
    """A line as an older bench wrote it with ``json.dumps`` (NaN/Infinity as bare tokens)."""
    return json.dumps({"kind": kind, kind: payload}) + "\n"


def observed(**kw: Any) -> dec.Observed:
    base: dict[str, Any] = {"name": NAME, "namespace": NS, "uid": UID, "generation": 1, "spec": SPEC,
                            "status": ExperimentStatus(), "now": T0}
    return dec.Observed(**{**base, **kw})


def running_status(phase: str = "Running") -> ExperimentStatus:
    return ExperimentStatus(phase=phase, observed_generation=1, job_name=JOB, start_time=ts(0))  # type: ignore[arg-type]


@dataclass
class ApiServer:
    """Scripted answers to the decision step's questions (what the reactor would find out)."""

    admitted: bool = True
    synced: bool = True
    job_exists: bool = False
    log: str | None = None
    message: str | None = None
    refusal: dec.JobCreation | None = None
    #: What a read of a node's ``Ready`` condition answers (None: the node cannot be read).
    node_ready: bool | None = True
    asked: list[dec.Need] = field(default_factory=list)

    def answer(self, need: dec.Need, o: dec.Observed) -> dict[str, Any]:
        self.asked.append(need)
        if isinstance(need, dec.AskAdmission):
            return {"admission": dec.Admission(self.admitted, active=0 if self.admitted else 4, limit=4, synced=self.synced)}
        if isinstance(need, dec.CreateJob):
            if self.refusal is not None:
                return {"creation": self.refusal}
            created = {**need.manifest, "metadata": {**need.manifest["metadata"], "uid": "job-uid",
                                                      "creationTimestamp": ts(0)}}
            return {"jobs": [*o.jobs, created]}
        if isinstance(need, dec.ConfirmJobGone):
            return {} if self.job_exists else {"job_gone": True}
        if isinstance(need, dec.FetchFailedCreate):
            return {"failed_create": ""}
        if isinstance(need, dec.CheckNodes):
            return {"nodes": dict.fromkeys(need.names, self.node_ready)}
        if isinstance(need, dec.ReadResults):
            return {"results": dec.Results(message=self.message, log=self.log)}
        raise AssertionError(need)


def drive(o: dec.Observed, api: ApiServer | None = None, limit: int = 8) -> tuple[dec.Observed, list[dec.Plan]]:
    """Decide, apply the status, answer the question, decide again — until a decision needs nothing."""
    api = api or ApiServer()
    decisions: list[dec.Plan] = []
    for _ in range(limit):
        d = c.conclude(o)
        decisions.append(d)
        if d.status is not None:
            o = replace(o, status=d.status)
        if d.need is None:
            return o, decisions
        o = replace(o, **api.answer(d.need, o))
    raise AssertionError(f"no decision after {limit} steps: {decisions[-1]}")


def actions(decisions: list[dec.Plan]) -> list[dec.Action]:
    return [a for d in decisions for a in (*d.before, *d.after)]


def condition(status: ExperimentStatus, type_: str) -> tuple[str, str, str]:
    found = next(x for x in status.conditions if x.type == type_)
    return found.status, found.reason, found.message
