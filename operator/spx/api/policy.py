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


def check_policy(spec: Mapping[str, Any], policy: Policy) -> list[Violation]:
    """The rules of ``policy`` that an experiment's ``spec`` (the camelCase wire dict) breaks; [] if none.

    Reads only ``image``, ``scheduling.priorityClassName``, ``resources.tolerations`` and
    ``resources.nodeSelector``; other fields are the schema's business (:func:`spx.api.validate_spec`).
    Violations come in that field order, one per offending toleration or node-selector key.
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
