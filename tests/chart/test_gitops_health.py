"""The shipped GitOps health checks, run as the tools run them: the Argo CD Lua health check in a real Lua
(``lupa``, Lua 5.x from PyPI) and the Flux ``healthCheckExprs`` in a real CEL interpreter (``cel-python``),
against statuses the operator writes (built by its own condition steps, ``spx.controller.decide.conditions``),
and against an experiment the operator has not written yet.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from spx.api.status import ExperimentStatus
from spx.controller.decide import conditions as cond

GITOPS = __import__("spx_testing.chartlib", fromlist=["CHART"]).CHART / "gitops"
NOW = "2026-12-01T00:00:00Z"


def experiment(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
                           "metadata": {"name": "e", "namespace": "n", "generation": generation}, "spec": {}}
    if status is not None:
        obj["status"] = status
    return obj


def written(*steps: cond.Step, generation: int = 1) -> dict[str, Any]:
    """The status the operator writes after ``steps`` (a new run, then each step)."""
    status = cond.new_run(ExperimentStatus(), generation, NOW)
    for step in steps:
        status = cond.apply_step(status, step, NOW, generation)
    return status.to_wire()


#: (id, object, Argo CD health, Flux state)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("no-status-yet", experiment(None), "Progressing", "inProgress"),
    ("new-run", experiment(written()), "Progressing", "inProgress"),
    ("queued", experiment(written(cond.queued(1, 1))), "Suspended", "inProgress"),
    ("kueue-suspended", experiment(written(cond.suspended("e-g1", "gpu"))), "Suspended", "inProgress"),
    ("pending", experiment(written(cond.job_pending("e-g1"))), "Progressing", "inProgress"),
    ("running", experiment(written(cond.running("e-g1", "gpu-0", True))), "Progressing", "inProgress"),
    ("analyzing", experiment(written(cond.analyzing("e-g1", "JobSucceeded", "done"))), "Progressing", "inProgress"),
    ("pass", experiment(written(cond.decided("Pass", ["split wins"], "JobSucceeded", "ok"))), "Healthy", "current"),
    ("fail-verdict", experiment(written(cond.decided("Fail", ["split loses"], "JobSucceeded", "ok"))), "Healthy",
     "current"),
    ("inconclusive", experiment(written(cond.decided("Inconclusive", ["cpu"], "JobSucceeded", "ok"))), "Healthy",
     "current"),
    ("invalid-spec", experiment(written(cond.invalid_spec(["spec.x: bad"]))), "Degraded", "failed"),
    ("infra-failed", experiment(written(cond.failed("InfraFailed", "node lost", "NodeLost"))), "Degraded", "failed"),
    ("stale-generation", experiment(written(cond.decided("Pass", ["ok"], "JobSucceeded", "ok")), generation=2),
     "Progressing", "inProgress"),
]


@pytest.fixture(scope="module")
def argocd() -> Any:
    lupa = pytest.importorskip("lupa", reason="lupa (dev dependency) is not installed")
    runtime = lupa.LuaRuntime(unpack_returned_tuples=True)
    body = (GITOPS / "argocd-health.lua").read_text()
    return runtime.eval(f"function(obj)\n{body}\nend"), runtime


def _lua_value(runtime: Any, value: Any) -> Any:
    """A JSON value as Argo CD hands it to Lua: objects and arrays as tables (arrays 1-based)."""
    if isinstance(value, dict):
        return runtime.table_from({k: _lua_value(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_lua_value(runtime, v) for v in value])
    return value


@pytest.mark.parametrize(("case", "obj", "health", "flux"), CASES, ids=[c[0] for c in CASES])
def test_argocd_health_check(argocd: Any, case: str, obj: dict[str, Any], health: str, flux: str) -> None:
    check, runtime = argocd
    result = check(_lua_value(runtime, json.loads(json.dumps(obj))))
    assert result["status"] == health, (case, result["message"])
    assert result["message"]


@pytest.mark.parametrize(("case", "obj", "health", "flux"), CASES, ids=[c[0] for c in CASES])
def test_flux_health_check_exprs(case: str, obj: dict[str, Any], health: str, flux: str) -> None:
    celpy = pytest.importorskip("celpy", reason="cel-python (dev dependency) is not installed")
    (rule,) = yaml.safe_load((GITOPS / "flux-health-check-exprs.yaml").read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("bench.spx.dev/v1alpha1", "ShardedProjectionExperiment")
    env = celpy.Environment()
    activation = {k: celpy.json_to_cel(v) for k, v in obj.items()}
    if "status" not in activation:
        activation["status"] = celpy.json_to_cel({})
    states = []
    for state in ("inProgress", "failed", "current"):
        program = env.program(env.compile(rule[state]))
        try:
            if bool(program.evaluate(activation)):
                states.append(state)
        except celpy.CELEvalError:
            pass  # Flux treats an expression that cannot be evaluated as not matching
    # Flux evaluates inProgress first, then failed, then current: the first that holds wins
    assert states and states[0] == flux, (case, states)
