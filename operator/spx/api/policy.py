"""What an experiment may ask for on a shared cluster: the operator's allowlist (pure).

Whoever may create a ``ShardedProjectionExperiment`` gets a pod with ``TP`` GPUs without holding
rights to create pods or Jobs; the cluster's admin bounds what such a pod may be through this
policy, set on the operator (chart values ``policy`` → environment variable :data:`ENV_VAR`, JSON in
the camelCase wire form) and, optionally, as a ValidatingAdmissionPolicy with the same rules
(``charts/spx-operator/templates/admissionpolicy.yaml``; ``tests/chart/test_policy_cluster.py``
checks on a real API server that both refuse the same experiments with the same rule names).

Rules, each an allowlist; an entry ``"*"`` allows anything:

- ``imageRegistries``: ``spec.image`` must start with one of these prefixes, each ending in ``/``
  (``ghcr.io/spx-dev/``; the ``/`` keeps ``ghcr.io/spx`` from matching ``ghcr.io/spx-evil/…``) — or
  end in ``@<digest>`` with a digest of ``imageDigests`` (``sha256:<64 hex>``), from any registry.
  With ``requireImageDigest`` the image must also be pinned by a ``@sha256:`` digest.
  An experiment without ``spec.image`` runs the operator's own bench image and is not checked.
- ``priorityClasses``: allowed ``spec.scheduling.priorityClassName`` values (unset is always allowed).
- ``tolerations``: each of ``spec.resources.tolerations`` must match one rule: same ``key`` (a rule
  key ``"*"`` matches any toleration), and ``operator``/``value``/``effect`` equal where the rule
  sets them (unset or ``""``: any). The ``nvidia.com/gpu`` toleration the operator adds itself is
  not the user's and is not checked.
- ``nodeSelectorKeys``: allowed keys of ``spec.resources.nodeSelector``.

What runs in the pod (each a list of patterns: ``"*"`` anything, ``"NCCL_*"`` a prefix, else exact):

- ``envNames``: names of ``spec.pod.env`` and keys of ``spec.serving.env`` (``LD_PRELOAD`` runs code).
- ``servingExtraArgs``: the flags (``--name``, the part before ``=``) of ``spec.serving.extraArgs`` and
  ``spec.serving.extraBenchArgs`` (``--trust-remote-code`` runs the model repository's code); a word
  not starting with ``-`` is the previous flag's value and not checked.
- ``servingModels``: ``spec.serving.model`` (the weights, and with remote code the code, it loads).
- ``volumeTypes``: sources of ``spec.pod.volumes`` (persistentVolumeClaim, configMap, secret, emptyDir).
- ``volumeClaims``: PersistentVolumeClaims of ``spec.pod.volumes`` and ``spec.serving.modelPvc``.
- ``runtimeClasses`` / ``schedulerNames``: ``spec.pod.runtimeClassName`` / ``spec.pod.schedulerName``.
- ``podLabelKeys`` / ``podAnnotationKeys``: keys of ``spec.pod.labels`` / ``spec.pod.annotations``.
- ``allowAffinity``: whether ``spec.resources.affinity`` (the user's own affinity) may be set.

The default :class:`Policy` allows everything (``spx run`` and clusters that opt out); the chart's
default values are strict (its own registry, no priority class, no toleration).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import Field, ValidationError, field_validator

from spx.api.base import CamelModel
from spx.api.pod import VOLUME_TYPES

#: Environment variable of the operator holding the policy as JSON (camelCase).
ENV_VAR: Final = "SPX_POLICY"
#: ``reason`` of the ``Decided`` condition of an experiment the policy refused (phase Failed, InvalidSpec).
REASON: Final = "PolicyViolation"
ANY: Final = "*"
DIGEST = r"^sha256:[a-f0-9]{64}$"
_PINNED = re.compile(r"@sha256:[a-f0-9]{64}$")
#: Longest excerpt of a bad value quoted in a message.
EXCERPT_CHARS = 80


def _excerpt(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


#: An allowlist entry: ``"*"``, a prefix ending in ``*`` (``NCCL_*``), or an exact value.
Pattern = Annotated[str, Field(min_length=1, max_length=512)]


def matches(value: str, patterns: Sequence[str]) -> bool:
    """Whether ``value`` matches one of ``patterns`` (``"*"`` any, ``"X*"`` prefix X, else equality)."""
    return any(value == p or (p.endswith(ANY) and value.startswith(p[:-1])) for p in patterns)


def serving_flags(args: Sequence[str]) -> list[str]:
    """The flags of a vLLM argument list: words starting with ``-``, cut at ``=``
    (``["--max-model-len", "8192", "--kv-cache-dtype=fp8"]`` → ``["--max-model-len", "--kv-cache-dtype"]``)."""
    return [str(a).split("=", 1)[0] for a in args if str(a).startswith("-")]


class TolerationRule(CamelModel):
    """One allowed toleration shape; unset or empty ``operator``/``value``/``effect`` match any."""

    key: str = Field(max_length=317)
    operator: str | None = Field(default=None, pattern=r"^(|Equal|Exists)$")
    value: str | None = Field(default=None, max_length=63)
    effect: str | None = Field(default=None, pattern=r"^(|NoSchedule|PreferNoSchedule|NoExecute)$")

    def matches(self, toleration: Mapping[str, Any]) -> bool:
        """Whether a pod toleration (a ``core/v1`` Toleration dict) is of this shape.

        A toleration's ``operator`` defaults to ``Equal`` as in the Kubernetes API.
        """
        if self.key == ANY:
            return True
        if str(toleration.get("key") or "") != self.key:
            return False
        if self.operator and str(toleration.get("operator") or "Equal") != self.operator:
            return False
        if self.value and str(toleration.get("value") or "") != self.value:
            return False
        return not self.effect or str(toleration.get("effect") or "") == self.effect

    def describe(self) -> str:
        parts = [f"key={self.key}"] + [f"{k}={v}" for k, v in
                                       (("operator", self.operator), ("value", self.value), ("effect", self.effect)) if v]
        return "{" + ", ".join(parts) + "}"


class Policy(CamelModel):
    """The operator's allowlist of what an experiment's pod may be (see the module docstring)."""

    image_registries: list[Annotated[str, Field(min_length=1, max_length=255)]] = Field(default_factory=lambda: [ANY])
    image_digests: list[Annotated[str, Field(pattern=DIGEST)]] = Field(default_factory=list)
    require_image_digest: bool = False
    priority_classes: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(default_factory=lambda: [ANY])
    tolerations: list[TolerationRule] = Field(default_factory=lambda: [TolerationRule(key=ANY)])
    node_selector_keys: list[Annotated[str, Field(min_length=1, max_length=317)]] = Field(default_factory=lambda: [ANY])
    env_names: list[Pattern] = Field(default_factory=lambda: [ANY])
    serving_extra_args: list[Pattern] = Field(default_factory=lambda: [ANY])
    serving_models: list[Pattern] = Field(default_factory=lambda: [ANY])
    volume_types: list[Pattern] = Field(default_factory=lambda: [ANY])
    volume_claims: list[Pattern] = Field(default_factory=lambda: [ANY])
    runtime_classes: list[Pattern] = Field(default_factory=lambda: [ANY])
    scheduler_names: list[Pattern] = Field(default_factory=lambda: [ANY])
    pod_label_keys: list[Pattern] = Field(default_factory=lambda: [ANY])
    pod_annotation_keys: list[Pattern] = Field(default_factory=lambda: [ANY])
    allow_affinity: bool = True

    @field_validator("image_registries")
    @classmethod
    def _prefixes_end_in_slash(cls, v: list[str]) -> list[str]:
        bad = [p for p in v if p != ANY and not p.endswith("/")]
        if bad:
            raise ValueError(
                f"imageRegistries entries must end in '/' (a registry or repository prefix such as "
                f"'ghcr.io/spx-dev/'), got {bad}; without it 'ghcr.io/spx' would also allow 'ghcr.io/spx-evil/…'"
            )
        return v


@dataclass(frozen=True)
class Violation:
    """One rule an experiment breaks: ``rule`` (``policy.<name>``), the spec ``field`` and a message
    that quotes a bounded excerpt of the value and says what is allowed."""

    rule: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


def _allowed(values: Sequence[str]) -> str:
    return ", ".join(values) if values else "nothing"


def _check_image(image: str, policy: Policy) -> list[Violation]:
    out: list[Violation] = []
    registry_ok = any(p == ANY or image.startswith(p) for p in policy.image_registries)
    digest_ok = any(image.endswith("@" + d) for d in policy.image_digests)
    if not (registry_ok or digest_ok):
        also = f" or pinned to one of {len(policy.image_digests)} allowed digests" if policy.image_digests else ""
        out.append(Violation(
            "policy.imageRegistries", "spec.image",
            f"spec.image {_excerpt(image)!r} is not from an allowed registry ({_allowed(policy.image_registries)}){also}; "
            "use an allowed image or leave spec.image unset for the operator's bench image",
        ))
    if policy.require_image_digest and not _PINNED.search(image):
        out.append(Violation(
            "policy.requireImageDigest", "spec.image",
            f"spec.image {_excerpt(image)!r} is not pinned by digest; use <repository>@sha256:<64 hex digits>",
        ))
    return out


def check_bench_image(image: str, policy: Policy) -> list[Violation]:
    """The rules the operator's *default* bench image (``SPX_BENCH_IMAGE``, for experiments without
    ``spec.image``) breaks: with ``requireImageDigest`` it must be pinned by ``@sha256:`` digest too
    (the pod that gets 8 GPUs runs it). The operator refuses to start on a violation."""
    if not policy.require_image_digest or _PINNED.search(image):
        return []
    return [Violation(
        "policy.requireImageDigest", "SPX_BENCH_IMAGE",
        f"the default bench image {_excerpt(image)!r} is not pinned by digest; set SPX_BENCH_IMAGE (chart: "
        "bench.image.digest) to <repository>@sha256:<64 hex digits>",
    )]


def check_policy(spec: Mapping[str, Any], policy: Policy) -> list[Violation]:
    """The rules of ``policy`` that an experiment's ``spec`` (the camelCase wire dict) breaks; [] if none.

    Reads ``image``, ``scheduling.priorityClassName``, ``resources.tolerations``,
    ``resources.nodeSelector``, then what runs in the pod (:func:`_check_runs`: ``resources.affinity``,
    ``pod.*``, ``serving.env``/``extraArgs``/``extraBenchArgs``/``model``/``modelPvc``); the rest is the
    schema's business (:func:`spx.api.validate_spec`). Violations come in that order, one per
    offending entry.
    """
    out: list[Violation] = []
    image = spec.get("image")
    if image:
        out += _check_image(str(image), policy)
    priority = (spec.get("scheduling") or {}).get("priorityClassName")
    if priority and not any(p == ANY or p == priority for p in policy.priority_classes):
        out.append(Violation(
            "policy.priorityClasses", "spec.scheduling.priorityClassName",
            f"priorityClassName {_excerpt(priority)!r} is not allowed (allowed: {_allowed(policy.priority_classes)}); "
            "remove it or use an allowed one",
        ))
    resources = spec.get("resources") or {}
    for i, toleration in enumerate(resources.get("tolerations") or []):
        if not any(rule.matches(toleration) for rule in policy.tolerations):
            allowed = ", ".join(r.describe() for r in policy.tolerations) or "none"
            out.append(Violation(
                "policy.tolerations", f"spec.resources.tolerations[{i}]",
                f"toleration {_excerpt(toleration)} is not allowed (allowed: {allowed}); remove it",
            ))
    for key in sorted(resources.get("nodeSelector") or {}):
        if not any(k == ANY or k == key for k in policy.node_selector_keys):
            out.append(Violation(
                "policy.nodeSelectorKeys", f"spec.resources.nodeSelector[{_excerpt(key)}]",
                f"nodeSelector key {_excerpt(key)!r} is not allowed (allowed: {_allowed(policy.node_selector_keys)}); remove it",
            ))
    out += _check_runs(spec, policy)
    return out


def _refuse(rule: str, field: str, what: str, value: str, allowed: Sequence[str]) -> Violation:
    return Violation(rule, field, f"{what} {_excerpt(value)!r} is not allowed (allowed: {_allowed(allowed)}); remove it "
                                  "or ask the cluster's admin to allow it")


def _check_runs(spec: Mapping[str, Any], policy: Policy) -> list[Violation]:
    """The rules on what runs in the pod: ``spec.pod``, ``spec.serving``, ``spec.resources.affinity``."""
    out: list[Violation] = []
    pod = spec.get("pod") or {}
    serving = spec.get("serving") or {}
    if (spec.get("resources") or {}).get("affinity") and not policy.allow_affinity:
        out.append(Violation("policy.allowAffinity", "spec.resources.affinity",
                             "spec.resources.affinity is not allowed on this cluster; remove it (use "
                             "resources.nodeSelector or gpuNodeAffinity)"))
    for field, value, rule, allowed, what in (
        ("spec.pod.runtimeClassName", pod.get("runtimeClassName"), "policy.runtimeClasses", policy.runtime_classes,
         "runtimeClassName"),
        ("spec.pod.schedulerName", pod.get("schedulerName"), "policy.schedulerNames", policy.scheduler_names,
         "schedulerName"),
    ):
        if value and not matches(str(value), allowed):
            out.append(_refuse(rule, field, what, str(value), allowed))
    for key in sorted(pod.get("labels") or {}):
        if not matches(key, policy.pod_label_keys):
            out.append(_refuse("policy.podLabelKeys", f"spec.pod.labels[{_excerpt(key)}]", "pod label key", key,
                               policy.pod_label_keys))
    for key in sorted(pod.get("annotations") or {}):
        if not matches(key, policy.pod_annotation_keys):
            out.append(_refuse("policy.podAnnotationKeys", f"spec.pod.annotations[{_excerpt(key)}]",
                               "pod annotation key", key, policy.pod_annotation_keys))
    envs = [(f"spec.pod.env[{i}].name", str(e.get("name"))) for i, e in enumerate(pod.get("env") or [])]
    envs += [(f"spec.serving.env[{_excerpt(k)}]", k) for k in sorted(serving.get("env") or {})]
    out += [_refuse("policy.envNames", f, "environment variable", n, policy.env_names)
            for f, n in envs if not matches(n, policy.env_names)]
    for i, volume in enumerate(pod.get("volumes") or []):
        kind = next((t for t in VOLUME_TYPES if volume.get(t) is not None), "")
        if not matches(kind, policy.volume_types):
            out.append(_refuse("policy.volumeTypes", f"spec.pod.volumes[{i}]", "volume type", kind, policy.volume_types))
        claim = volume.get("persistentVolumeClaim")
        if claim and not matches(str(claim), policy.volume_claims):
            out.append(_refuse("policy.volumeClaims", f"spec.pod.volumes[{i}].persistentVolumeClaim",
                               "PersistentVolumeClaim", str(claim), policy.volume_claims))
    if serving.get("modelPvc") and not matches(str(serving["modelPvc"]), policy.volume_claims):
        out.append(_refuse("policy.volumeClaims", "spec.serving.modelPvc", "PersistentVolumeClaim",
                           str(serving["modelPvc"]), policy.volume_claims))
    if serving.get("model") and not matches(str(serving["model"]), policy.serving_models):
        out.append(_refuse("policy.servingModels", "spec.serving.model", "model", str(serving["model"]),
                           policy.serving_models))
    for field in ("extraArgs", "extraBenchArgs"):
        for flag in serving_flags(serving.get(field) or []):
            if not matches(flag, policy.serving_extra_args):
                out.append(_refuse("policy.servingExtraArgs", f"spec.serving.{field}", "argument", flag,
                                   policy.serving_extra_args))
    return out


def describe_violations(violations: Sequence[Violation]) -> str:
    """One message for the ``Decided`` condition: every violation, rule first, ``; ``-separated."""
    return "; ".join(str(v) for v in violations)


def policy_from_env(env: Mapping[str, str]) -> Policy:
    """The policy in ``env[ENV_VAR]`` (JSON, camelCase); unset or empty: :class:`Policy` (allow all).

    Raises:
        ValueError: the variable is not JSON or not a valid policy, naming ``SPX_POLICY``, the field
            and an excerpt of the value.
    """
    raw = (env.get(ENV_VAR) or "").strip()
    if not raw:
        return Policy()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"{ENV_VAR} is not JSON ({err.msg} at {err.pos}): {_excerpt(raw)}") from None
    try:
        return Policy.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']} (got {_excerpt(e.get('input'))})" for e in err.errors()
        )
        raise ValueError(f"{ENV_VAR} is not a valid policy: {problems}") from None
