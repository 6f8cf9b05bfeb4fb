"""The shipped GitOps health checks, run as the tools run them: the Argo CD Lua health checks in a real Lua
(``lupa``, Lua 5.x from PyPI) and the Flux ``healthCheckExprs`` in a real CEL interpreter (``cel-python``),
against statuses the operator writes (built by its own condition transitions, ``spx.controller.decide.conditions``),
against an experiment the operator has not written yet, and against one read back from the real API
server (``KUBEBUILDER_ASSETS``).

The gate checks (``argocd-health.lua``, ``flux-health-check-exprs.yaml``) are judged by what the tools do
with their answer:

- gitops-engine (``pkg/sync/sync_context.go``): Degraded (or Unknown) fails the sync operation,
  Progressing and Suspended keep it running (the next sync wave waits), Healthy lets it go on;
- Flux (RFC-0009, ``fluxcd/pkg`` ``runtime/cel`` ``StatusEvaluator``): InProgress while
  ``status.observedGeneration`` differs from ``metadata.generation``; then ``inProgress``, ``failed``,
  ``current`` in this order, the first true wins, none true is InProgress, and an evaluation error is
  returned as an error (the check never becomes Current); a ``dependsOn`` proceeds only on Current.

So a Fail verdict must stop (Degraded / failed), Inconclusive hold (Suspended / inProgress), Pass go
(Healthy / current). The "measurement finished" checks (``*-finished``) report any verdict as done.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from spx.api.status import ExperimentStatus
from spx.controller.decide import conditions as cond
from spx.vocabulary import DECIDED_REASONS, FAILURE_REASONS, VERDICTS

GITOPS = __import__("spx_testing.chartlib", fromlist=["CHART"]).CHART / "gitops"
NOW = "2026-12-01T00:00:00Z"
#: What each tool does with a health answer (see the module docstring).
ARGO_SYNC = {"Healthy": "goes", "Progressing": "waits", "Suspended": "waits", "Degraded": "fails",
             "Unknown": "fails"}
FLUX_DEPENDS_ON = {"current": "goes", "inProgress": "waits", "failed": "fails", "error": "fails"}


def experiment(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
                           "metadata": {"name": "e", "namespace": "n", "generation": generation}, "spec": {}}
    if status is not None:
        obj["status"] = status
    return obj


def written(*transitions: cond.Transition, generation: int = 1) -> dict[str, Any]:
    """The status the operator writes after ``transitions`` (a new run, then each)."""
    status = cond.new_run(ExperimentStatus(), generation, NOW)
    for transition in transitions:
        status = cond.apply_transition(status, transition, NOW, generation)
    return status.to_wire()


def decided(verdict: str) -> dict[str, Any]:
    return experiment(written(cond.decided(verdict, [f"{verdict.lower()} reason"], "JobSucceeded", "ok")))


#: (id, object, gate: Argo CD health, gate: Flux state, finished: Argo CD health, finished: Flux state)
CASES: list[tuple[str, dict[str, Any], str, str, str, str]] = [
    ("empty-status", experiment({}), "Progressing", "inProgress", "Progressing", "inProgress"),
    ("new-run", experiment(written()), "Progressing", "inProgress", "Progressing", "inProgress"),
    ("queued", experiment(written(cond.queued(1, 1))), "Suspended", "inProgress", "Suspended", "inProgress"),
    ("kueue-suspended", experiment(written(cond.suspended("e-g1", "gpu"))), "Suspended", "inProgress", "Suspended",
     "inProgress"),
    ("pending", experiment(written(cond.job_pending("e-g1"))), "Progressing", "inProgress", "Progressing", "inProgress"),
    ("running", experiment(written(cond.running("e-g1", "gpu-0", True))), "Progressing", "inProgress", "Progressing",
     "inProgress"),
    ("analyzing", experiment(written(cond.analyzing("e-g1", "JobSucceeded", "done"))), "Progressing", "inProgress",
     "Progressing", "inProgress"),
    ("pass", decided("Pass"), "Healthy", "current", "Healthy", "current"),
    ("fail-verdict", decided("Fail"), "Degraded", "failed", "Healthy", "current"),
    ("inconclusive", decided("Inconclusive"), "Suspended", "inProgress", "Healthy", "current"),
    ("invalid-spec", experiment(written(cond.invalid_spec(["spec.x: bad"]))), "Degraded", "failed", "Degraded",
     "failed"),
    ("infra-failed", experiment(written(cond.failed("InfraFailed", "node lost", "NodeLost"))), "Degraded", "failed",
     "Degraded", "failed"),
    ("stale-generation", experiment(written(cond.decided("Pass", ["ok"], "JobSucceeded", "ok")), generation=2),
     "Progressing", "inProgress", "Progressing", "inProgress"),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(scope="module")
def lua() -> Any:
    lupa = pytest.importorskip("lupa", reason="lupa (dev dependency) is not installed")
    return lupa.LuaRuntime(unpack_returned_tuples=True)


def argocd(runtime: Any, check: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Run the Lua health check ``check`` on ``obj`` as Argo CD does (``obj`` a global table)."""
    body = (GITOPS / check).read_text()
    result = runtime.eval(f"function(obj)\n{body}\nend")(_lua_value(runtime, json.loads(json.dumps(obj))))
    return {"status": result["status"], "message": result["message"]}


def _lua_value(runtime: Any, value: Any) -> Any:
    """A JSON value as Argo CD hands it to Lua: objects and arrays as tables (arrays 1-based)."""
    if isinstance(value, dict):
        return runtime.table_from({k: _lua_value(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_lua_value(runtime, v) for v in value])
    return value


def flux(check: str, obj: dict[str, Any]) -> str:
    """Flux's StatusEvaluator on ``obj`` with the ``healthCheckExprs`` of ``check``: ``inProgress``,
    ``failed``, ``current``, or ``error`` (an expression that cannot be evaluated). The object is the
    activation as it is: no field is added (Flux adds none)."""
    celpy = pytest.importorskip("celpy", reason="cel-python (dev dependency) is not installed")
    (rule,) = yaml.safe_load((GITOPS / check).read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("bench.spx.dev/v1alpha1", "ShardedProjectionExperiment")
    observed = (obj.get("status") or {}).get("observedGeneration")
    if observed is not None and observed != obj["metadata"].get("generation"):
        return "inProgress"
    env = celpy.Environment()
    activation = {k: celpy.json_to_cel(v) for k, v in obj.items()}
    for state in ("inProgress", "failed", "current"):
        # cel-go (Flux) answers "no such attribute" for any reference to a top-level field the object
        # lacks, has() included; cel-python calls has() of an unbound name false: follow cel-go
        if any(re.search(rf"\b{field}\b", rule[state]) for field in ("status", "spec") if field not in obj):
            return "error"
        try:
            result = env.program(env.compile(rule[state])).evaluate(activation)
        except celpy.CELEvalError:
            return "error"
        if isinstance(result, celpy.CELEvalError):
            return "error"
        if bool(result):
            return state
    return "inProgress"


@pytest.mark.parametrize(("case", "obj", "health", "state", "done_health", "done_state"), CASES, ids=IDS)
def test_argocd_gate(lua: Any, case: str, obj: dict[str, Any], health: str, state: str, done_health: str,
                     done_state: str) -> None:
    result = argocd(lua, "argocd-health.lua", obj)
    assert result["status"] == health, (case, result["message"])
    assert result["message"]


@pytest.mark.parametrize(("case", "obj", "health", "state", "done_health", "done_state"), CASES, ids=IDS)
def test_flux_gate(case: str, obj: dict[str, Any], health: str, state: str, done_health: str, done_state: str) -> None:
    assert flux("flux-health-check-exprs.yaml", obj) == state, case


@pytest.mark.parametrize(("case", "obj", "health", "state", "done_health", "done_state"), CASES, ids=IDS)
def test_finished_checks(lua: Any, case: str, obj: dict[str, Any], health: str, state: str, done_health: str,
                         done_state: str) -> None:
    assert argocd(lua, "argocd-health-finished.lua", obj)["status"] == done_health, case
    assert flux("flux-health-check-exprs-finished.yaml", obj) == done_state, case


def test_the_gate_stops_on_fail_holds_on_inconclusive_and_goes_on_pass(lua: Any) -> None:
    """The contract of docs/gating.md, as the tools act on it: Fail stops, Inconclusive holds, Pass goes;
    the finished checks would let a Fail through (which is why they are not the gate)."""
    for verdict, action in (("Fail", "fails"), ("Inconclusive", "waits"), ("Pass", "goes")):
        obj = decided(verdict)
        assert ARGO_SYNC[argocd(lua, "argocd-health.lua", obj)["status"]] == action, verdict
        assert FLUX_DEPENDS_ON[flux("flux-health-check-exprs.yaml", obj)] == action, verdict
    assert ARGO_SYNC[argocd(lua, "argocd-health-finished.lua", decided("Fail"))["status"]] == "goes"
    assert "human" in argocd(lua, "argocd-health.lua", decided("Inconclusive"))["message"]


def test_an_object_without_status_cannot_be_evaluated_by_cel_but_argo_waits(lua: Any) -> None:
    """No ``status`` key at all: Argo CD's Lua sees nil and waits; a CEL expression over ``status`` is an
    evaluation error (Flux returns it; it never becomes Current, but it is an error, not a wait). Hence the
    CRD's ``status`` default: the API server never hands out such an object (next test)."""
    bare = experiment(None)
    assert argocd(lua, "argocd-health.lua", bare)["status"] == "Progressing"
    assert flux("flux-health-check-exprs.yaml", bare) == "error"


def test_a_new_experiment_read_from_the_api_server_is_in_progress(lua: Any, kube: Any, tmp_path: Path) -> None:
    """On the real control plane (the CRD from crds/): an experiment created without status, before any
    operator wrote one, is read back with ``status: {}`` (the schema default), and both gate checks hold."""
    from spx_testing.kubeapi import wait_for

    ns = "gitops-health"
    kube.create("v1", "namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_for(lambda: kube.list("v1", "serviceaccounts", ns) or True, 30, "the namespace")
    body = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
            "metadata": {"name": "fresh", "namespace": ns}, "spec": {"sweep": {"tokens": [64, 128]}}}
    kube.create("bench.spx.dev/v1alpha1", "shardedprojectionexperiments", ns, body)
    obj = kube.get("bench.spx.dev/v1alpha1", "shardedprojectionexperiments", ns, "fresh")
    assert obj["status"] == {}, obj.get("status")
    assert argocd(lua, "argocd-health.lua", obj)["status"] == "Progressing"
    assert flux("flux-health-check-exprs.yaml", obj) == "inProgress"
    assert flux("flux-health-check-exprs-finished.yaml", obj) == "inProgress"


def _decided_with(reason: str) -> dict[str, Any]:
    """An experiment decided with ``reason``, as an operator of a later release might write one (the status is
    built as the operator builds it, then its Decided reason set to one this release does not know)."""
    obj = experiment(written(cond.failed("InfraFailed", "node lost", "NodeLost")))
    for c in obj["status"]["conditions"]:
        if c["type"] == "Decided":
            c["reason"] = reason
    return obj


@pytest.mark.parametrize("reason", ["ReasonOfALaterRelease", "NotAVerdictYet"])
def test_a_reason_a_later_operator_adds_fails_closed(lua: Any, reason: str) -> None:
    """Issue 38: the Flux expressions once listed the failure reasons, so a new one matched none of
    inProgress/failed/current and Flux reported InProgress until its timeout. Now every check stops on it."""
    obj = _decided_with(reason)
    assert reason not in DECIDED_REASONS
    assert argocd(lua, "argocd-health.lua", obj)["status"] == "Degraded"
    assert argocd(lua, "argocd-health-finished.lua", obj)["status"] == "Degraded"
    assert flux("flux-health-check-exprs.yaml", obj) == "failed"
    assert flux("flux-health-check-exprs-finished.yaml", obj) == "failed"


@pytest.mark.parametrize("check", sorted(p.name for p in GITOPS.iterdir()))
def test_the_checks_name_verdicts_never_failure_reasons(check: str) -> None:
    """The shipped checks, comments aside, name the verdicts (spx.vocabulary.VERDICTS) and no failure reason:
    what is not a verdict they treat alike, so a reason added to the vocabulary needs no edit here."""
    code = "\n".join(line.split("--")[0].split("#")[0] for line in (GITOPS / check).read_text().splitlines())
    named = set(re.findall(r"['\"]([A-Z][A-Za-z]+)['\"]", code)) - {"ShardedProjectionExperiment"}
    assert not named & set(FAILURE_REASONS), (check, named & set(FAILURE_REASONS))
    assert named & set(DECIDED_REASONS) <= set(VERDICTS), check
