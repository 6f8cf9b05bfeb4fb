"""Start-up check: is the installed CRD the one this operator was built for? (pure: no kopf, no I/O)

The operator reads ``GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/<CRD_NAME>``
(RBAC: ``get`` on that one name, ``charts/spx-operator/templates/rbac.yaml``) and passes the object,
or None on 404, to :func:`check_crd`. On a mismatch it must not start: a CRD older than the
operator silently prunes the status fields the operator writes (kopf #574), a newer one may
reject them. The message names the command that fixes it (``docs/install.md`` "Upgrading").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spx.api.crd_version import SCHEMA_VERSION, SCHEMA_VERSION_LABEL
from spx.api.exit_codes import EXIT_CONFIG
from spx.api.spec import GROUP, PLURAL, VERSION
from spx.controller.decide import objects as objs

CRD_NAME = f"{PLURAL}.{GROUP}"
#: Exit status of ``spx operator`` when the check fails (EX_CONFIG of sysexits.h; spx.api.exit_codes).
EXIT_CODE = EXIT_CONFIG


def fix_command(operator_version: str) -> str:
    """The command that installs the CRD of ``operator_version`` (``spx crd`` of that version, or the
    chart's copy): server-side apply, which also takes over a CRD that Helm once created."""
    return (
        f"spx crd | kubectl apply --server-side --force-conflicts -f -   (spx {operator_version}; or "
        f"kubectl apply --server-side --force-conflicts -f charts/spx-operator/crds/{PLURAL}.yaml "
        f"from the spx-operator chart {operator_version})"
    )


@dataclass(frozen=True)
class CrdCheck:
    """Outcome of :func:`check_crd`: ``ok``, the installed schema version (None: unknown) and a message
    for the log (on failure: what is wrong, why it matters and the fixing command)."""

    ok: bool
    installed_version: int | None
    message: str


def check_crd(installed: Mapping[str, Any] | None, operator_version: str,
              expected: int = SCHEMA_VERSION) -> CrdCheck:
    """Compare the installed CRD (the API object, or None when it is not installed) with ``expected``.

    Fails when the CRD is missing, has no or a malformed :data:`SCHEMA_VERSION_LABEL` (a CRD from
    before schema versioning, i.e. older than version 1), carries another version, or does not serve
    ``v1alpha1``. Never raises.
    """
    fix = fix_command(operator_version)
    if installed is None:
        return CrdCheck(False, None, f"CRD {CRD_NAME} is not installed; install it before the operator: {fix}")
    labels = objs.meta(installed).get("labels") or {}
    raw = labels.get(SCHEMA_VERSION_LABEL)
    if raw is None:
        return CrdCheck(False, None, (
            f"CRD {CRD_NAME} has no {SCHEMA_VERSION_LABEL} label: it is older than this operator "
            f"(spx {operator_version}, schema {expected}) and would silently prune status fields it writes; "
            f"upgrade it: {fix}"))
    try:
        version = int(str(raw))
    except ValueError:
        return CrdCheck(False, None, (
            f"CRD {CRD_NAME} has label {SCHEMA_VERSION_LABEL}={str(raw)[:40]!r}, not an integer; re-apply it: {fix}"))
    served = [v.get("name") for v in objs.spec(installed).get("versions") or [] if v.get("served")]
    if version < expected:
        return CrdCheck(False, version, (
            f"CRD {CRD_NAME} has schema {version}, older than this operator's {expected} (spx {operator_version}): "
            f"status fields it writes would be silently pruned; upgrade the CRD (Helm never does): {fix}"))
    if version > expected:
        return CrdCheck(False, version, (
            f"CRD {CRD_NAME} has schema {version}, newer than this operator's {expected} (spx {operator_version}): "
            f"upgrade the operator to the release that installed this CRD (helm upgrade), or re-apply the "
            f"operator's own CRD: {fix}"))
    if VERSION not in served:
        return CrdCheck(False, version, (
            f"CRD {CRD_NAME} does not serve {VERSION} (served: {', '.join(map(str, served)) or 'none'}); re-apply it: {fix}"))
    return CrdCheck(True, version, f"CRD {CRD_NAME} has schema {version}, as this operator expects")
