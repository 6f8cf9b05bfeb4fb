"""spx.api.policy: the allowlist model, its environment form and check_policy's judgement (table).

The same rules as a ValidatingAdmissionPolicy on a real API server: tests/chart/test_policy_cluster.py.
"""

from __future__ import annotations

import json

import pytest

from spx.api.policy import (
    ENV_VAR,
    EXCERPT_CHARS,
    Policy,
    TolerationRule,
    check_policy,
    describe_violations,
    policy_from_env,
)

STRICT = Policy(
    image_registries=["ghcr.io/spx-dev/", "registry.example/ml/"],
    image_digests=["sha256:" + "c" * 64],
    priority_classes=["spx-bench"],
    tolerations=[TolerationRule(key="dedicated", value="gpu"), TolerationRule(key="nvidia.com/gpu", operator="Exists")],
    node_selector_keys=["kubernetes.io/hostname"],
)


@pytest.mark.parametrize(
    ("spec", "policy", "rules", "fields"),
    [
        ({}, STRICT, [], []),
        ({"image": "ghcr.io/spx-dev/spx-bench:0.1.0"}, STRICT, [], []),
        ({"image": "registry.example/ml/bench:7"}, STRICT, [], []),
        ({"image": "registry.example/mlx/bench:7"}, STRICT, ["policy.imageRegistries"], ["spec.image"]),
        ({"image": "docker.io/library/python:3"}, STRICT, ["policy.imageRegistries"], ["spec.image"]),
        ({"image": "evil.example/x@sha256:" + "c" * 64}, STRICT, [], []),  # an allowed digest, any registry
        ({"image": "ghcr.io/spx-dev/b:1"}, STRICT.model_copy(update={"require_image_digest": True}),
         ["policy.requireImageDigest"], ["spec.image"]),
        ({"image": "ghcr.io/spx-dev/b@sha256:" + "d" * 64}, STRICT.model_copy(update={"require_image_digest": True}), [], []),
        ({"scheduling": {"priorityClassName": "spx-bench"}}, STRICT, [], []),
        ({"scheduling": {"priorityClassName": None, "queueName": "q"}}, STRICT, [], []),
        ({"scheduling": {"priorityClassName": "system-node-critical"}}, STRICT, ["policy.priorityClasses"],
         ["spec.scheduling.priorityClassName"]),
        ({"resources": {"tolerations": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}, STRICT, [], []),
        ({"resources": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}, STRICT, [], []),
        # operator defaults to Equal: a rule for Exists does not allow it
        ({"resources": {"tolerations": [{"key": "nvidia.com/gpu", "value": "x"}]}}, STRICT, ["policy.tolerations"],
         ["spec.resources.tolerations[0]"]),
        ({"resources": {"tolerations": [{"key": "dedicated", "value": "gpu"}, {"operator": "Exists"}]}}, STRICT,
         ["policy.tolerations"], ["spec.resources.tolerations[1]"]),
        ({"resources": {"nodeSelector": {"kubernetes.io/hostname": "n1", "zone": "a", "rack": "7"}}}, STRICT,
         ["policy.nodeSelectorKeys", "policy.nodeSelectorKeys"],
         ["spec.resources.nodeSelector[rack]", "spec.resources.nodeSelector[zone]"]),
        # the default policy allows everything
        ({"image": "docker.io/x/y:1", "scheduling": {"priorityClassName": "p"},
          "resources": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {"a": "b"}}}, Policy(), [], []),
        # empty allowlists allow nothing
        ({"image": "ghcr.io/spx-dev/b:1", "scheduling": {"priorityClassName": "p"}},
         Policy(image_registries=[], priority_classes=[]), ["policy.imageRegistries", "policy.priorityClasses"],
         ["spec.image", "spec.scheduling.priorityClassName"]),
    ],
)
def test_check_policy(spec: dict, policy: Policy, rules: list[str], fields: list[str]) -> None:
    violations = check_policy(spec, policy)
    assert [v.rule for v in violations] == rules
    assert [v.field for v in violations] == fields


def test_messages_name_the_rule_quote_a_bounded_excerpt_and_say_what_is_allowed() -> None:
    long_image = "docker.io/" + "x" * 500 + ":1"
    (v,) = check_policy({"image": long_image}, STRICT)
    assert str(v).startswith("policy.imageRegistries: ")
    assert "ghcr.io/spx-dev/, registry.example/ml/" in v.message and "1 allowed digests" in v.message
    assert len(v.message) < 2 * EXCERPT_CHARS + 250 and "…" in v.message
    (t,) = check_policy({"resources": {"tolerations": [{"operator": "Exists"}]}}, STRICT)
    assert "{key=dedicated, value=gpu}" in t.message and "{key=nvidia.com/gpu, operator=Exists}" in t.message
    both = check_policy({"image": "a/b", "scheduling": {"priorityClassName": "p"}}, STRICT)
    assert describe_violations(both).count("; policy.") == 1


def test_registry_prefixes_must_end_in_a_slash() -> None:
    with pytest.raises(ValueError, match="ghcr.io/spx-evil"):
        Policy(image_registries=["ghcr.io/spx"])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, Policy()),
        ("", Policy()),
        (json.dumps({"imageRegistries": ["a.example/"], "imageDigests": [], "requireImageDigest": True,
                     "priorityClasses": [], "tolerations": [{"key": "k", "effect": "NoSchedule"}],
                     "nodeSelectorKeys": ["*"]}),
         Policy(image_registries=["a.example/"], require_image_digest=True, priority_classes=[],
                tolerations=[TolerationRule(key="k", effect="NoSchedule")])),
    ],
)
def test_policy_from_env(raw: str | None, expected: Policy) -> None:
    env = {} if raw is None else {ENV_VAR: raw}
    assert policy_from_env(env) == expected


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("{not json", ["SPX_POLICY is not JSON"]),
        (json.dumps({"imageRegistries": ["ghcr.io/x"]}), ["SPX_POLICY", "imageRegistries", "end in '/'"]),
        (json.dumps({"image_registries": ["a/"]}), ["SPX_POLICY", "image_registries"]),  # camelCase only
        (json.dumps({"imageDigests": ["sha256:12"]}), ["imageDigests.0", "sha256:12"]),
        (json.dumps({"tolerations": [{"key": "k", "effect": "Sometimes"}]}), ["tolerations.0.effect", "Sometimes"]),
    ],
)
def test_a_bad_policy_names_the_variable_and_the_field(raw: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        policy_from_env({ENV_VAR: raw})
    for w in words:
        assert w in str(err.value), str(err.value)
