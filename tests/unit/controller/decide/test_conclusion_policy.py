"""The operator's policy (``SPX_POLICY``, :mod:`spx.api.policy`) in the decision step, table-tested in
the shape of test_conclusion.py: (policy) × (what the spec asks for) × (where the run is) → the
decision. A refused experiment ends ``Failed``, ``Decided=InvalidSpec`` with the rules it breaks, event
reason ``PolicyViolation``, and never gets a Job (no admission slot is asked for either).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from spx.api import policy as pol
from spx.api.loading import validate_spec
from spx.api.spec import ExperimentSpec
from spx.controller.decide import conclusion as c
from spx.controller.decide import decision as dec
from spx.controller.manifests.naming import job_name

from .world import JOB, SPEC, T0, ApiServer, condition, drive, job, observed, pod, running_status

STRICT = pol.Policy(image_registries=["ghcr.io/spx-dev/"], priority_classes=[],
                    tolerations=[pol.TolerationRule(key="team", operator="Equal", value="ml")],
                    node_selector_keys=["nvidia.com/gpu.product"])
PINNED = pol.Policy(image_digests=["sha256:" + "b" * 64], image_registries=[], require_image_digest=True)
DIGEST = "@sha256:" + "b" * 64


def spec(**changes: Any) -> ExperimentSpec:
    """SPEC with camelCase changes (``resources``/``scheduling`` merged), validated as the operator does."""
    wire = SPEC.to_wire()
    for key, value in changes.items():
        wire[key] = {**wire[key], **value} if isinstance(value, dict) else value
    return validate_spec(wire, source="test")


# (id, policy, spec, rules broken in order: [] = allowed)
MATRIX = [
    ("default policy allows any image", pol.Policy(), spec(image="docker.io/anyone/anything:1"), []),
    ("the operator's own bench image is not checked", STRICT, SPEC, []),
    ("allowed registry", STRICT, spec(image="ghcr.io/spx-dev/spx-bench:0.2"), []),
    ("foreign registry", STRICT, spec(image="docker.io/evil/miner:1"), ["policy.imageRegistries"]),
    ("a look-alike prefix is not the registry", STRICT, spec(image="ghcr.io/spx-dev-evil/x:1"),
     ["policy.imageRegistries"]),
    ("pinned digest from any registry", PINNED, spec(image="docker.io/x/y" + DIGEST), []),
    ("digest required, tag given", PINNED, spec(image="docker.io/x/y:1"),
     ["policy.imageRegistries", "policy.requireImageDigest"]),
    ("priority class not allowed", STRICT, spec(scheduling={"priorityClassName": "system-cluster-critical"}),
     ["policy.priorityClasses"]),
    ("allowed toleration", STRICT,
     spec(resources={"tolerations": [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]}), []),
    ("one allowed and one foreign toleration", STRICT,
     spec(resources={"tolerations": [{"key": "team", "operator": "Equal", "value": "ml"},
                                     {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}),
     ["policy.tolerations"]),
    ("node selector key not allowed", STRICT,
     spec(resources={"nodeSelector": {"kubernetes.io/hostname": "gpu-7", "nvidia.com/gpu.product": "NVIDIA-H200"}}),
     ["policy.nodeSelectorKeys"]),
    ("every rule at once, in field order", STRICT,
     spec(image="docker.io/evil/miner:1", scheduling={"priorityClassName": "high"},
          resources={"tolerations": [{"key": "x", "operator": "Exists"}], "nodeSelector": {"a": "b"}}),
     ["policy.imageRegistries", "policy.priorityClasses", "policy.tolerations", "policy.nodeSelectorKeys"]),
]


@pytest.mark.parametrize(("policy", "the_spec", "rules"), [r[1:] for r in MATRIX], ids=[r[0] for r in MATRIX])
def test_a_new_experiment_is_refused_by_the_policy_or_gets_its_job(policy: pol.Policy, the_spec: ExperimentSpec,
                                                                   rules: list[str]) -> None:
    api = ApiServer()
    final, decisions = drive(observed(spec=the_spec, policy=policy), api)
    status = final.status
    if not rules:
        assert status.phase == "Pending" and status.job_name == JOB
        assert any(isinstance(n, dec.CreateJob) for n in api.asked)
        return
    violations = pol.check_policy(the_spec.to_wire(), policy)
    assert [v.rule for v in violations] == rules
    assert api.asked == []  # neither a slot nor a Job: the run never reaches a GPU
    assert status.phase == "Failed" and status.verdict is None and status.job_name is None
    assert condition(status, "Decided") == ("True", "InvalidSpec", pol.describe_violations(violations))
    assert condition(status, "Completed")[:2] == ("True", "NotRun")
    assert condition(status, "Scheduled")[:2] == ("False", pol.REASON)
    assert condition(status, "Stalled")[:2] == ("True", "InvalidSpec")
    assert status.completion_time is not None and status.observed_generation == 1
    (d,) = decisions
    assert d.outcome == "policy-violation" and d.events == (("Warning", pol.REASON, pol.describe_violations(violations)),)
    for rule in rules:
        assert rule in (status.message or "")
    # decided once: deciding again writes nothing, posts nothing, asks nothing
    again = c.conclude(replace(final, status=status))
    assert again.status is None and again.need is None and again.events == ()


REFUSED = spec(image="docker.io/evil/miner:1")


def test_a_queued_experiment_is_refused_once_the_policy_forbids_it() -> None:
    """Operator restarted with a stricter SPX_POLICY while the experiment waited for a slot."""
    queued = running_status("Queued").model_copy(update={"job_name": None})
    final, decisions = drive(observed(spec=REFUSED, status=queued, policy=STRICT), ApiServer(admitted=False))
    assert final.status.phase == "Failed" and condition(final.status, "Decided")[1] == "InvalidSpec"
    assert [d.outcome for d in decisions] == ["policy-violation"]


@pytest.mark.parametrize(("where", "o"), [
    ("running", observed(spec=REFUSED, status=running_status(), jobs=[job()], pods=[pod("Running", running=True)])),
    ("suspended in Kueue", observed(spec=REFUSED, status=running_status("Queued"), jobs=[job(suspend=True)],
                                    now=T0 + dt.timedelta(seconds=60))),
])
def test_a_run_started_before_the_policy_changed_is_not_stopped(where: str, o: dec.Observed) -> None:
    """The policy is admission: a Job created under the previous policy runs to its end."""
    d = c.conclude(replace(o, policy=STRICT))
    assert d == c.conclude(o)  # exactly what the permissive policy decides
    assert d.outcome != "policy-violation" and not d.before and not d.after


def test_a_new_generation_the_policy_refuses_deletes_the_old_job_and_creates_none() -> None:
    o = observed(generation=2, spec=REFUSED, policy=STRICT, status=running_status(), jobs=[job()])
    api = ApiServer()
    final, decisions = drive(o, api)
    assert [a for d in decisions for a in d.before] == [dec.DeleteJobs((JOB,), "superseded by generation 2")]
    assert final.status.phase == "Failed" and final.status.observed_generation == 2
    assert condition(final.status, "Decided")[:2] == ("True", "InvalidSpec") and api.asked == []
    assert job_name("ds", 2) not in str(decisions)


def test_the_reactor_hands_the_settings_policy_to_the_decision_step() -> None:
    from spx.controller.kube import KubeClient
    from spx.controller.reactor import Reactor
    from spx.controller.settings import load_settings

    s = load_settings({pol.ENV_VAR: '{"imageRegistries": ["ghcr.io/spx-dev/"], "priorityClasses": []}'})
    assert s.policy == pol.Policy(image_registries=["ghcr.io/spx-dev/"], priority_classes=[])
    reactor = Reactor(settings=s, client=KubeClient())
    reactor.store.put_experiment({"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
                                  "metadata": {"name": "ds", "namespace": "ml", "uid": "u", "generation": 1,
                                               "resourceVersion": "1"},
                                  "spec": REFUSED.to_wire()})
    o = reactor.observed(("ml", "ds"))
    assert o is not None and o.policy == s.policy
    assert c.conclude(o).outcome == "policy-violation"
    assert load_settings({}).policy == pol.Policy()  # unset: allow everything (spx run, opted-out clusters)


def test_require_image_digest_covers_the_default_bench_image() -> None:
    """The pod that gets the GPUs most often runs the operator's own bench image: with requireImageDigest
    the operator refuses to start unless SPX_BENCH_IMAGE is pinned by digest."""
    from spx.controller.settings import load_settings

    strict = '{"requireImageDigest": true}'
    with pytest.raises(ValueError, match="policy.requireImageDigest: the default bench image 'ghcr.io/spx-dev/spx-bench:0.1.0'"):
        load_settings({pol.ENV_VAR: strict, "SPX_BENCH_IMAGE": "ghcr.io/spx-dev/spx-bench:0.1.0"})
    pinned = "ghcr.io/spx-dev/spx-bench@sha256:" + "c" * 64
    assert load_settings({pol.ENV_VAR: strict, "SPX_BENCH_IMAGE": pinned}).bench_image == pinned
    assert load_settings({"SPX_BENCH_IMAGE": "ghcr.io/spx-dev/spx-bench:0.1.0"}).policy.require_image_digest is False
