"""The CRD's schema version: a label on the installed CustomResourceDefinition (pure).

Helm installs ``crds/`` once and never upgrades it, so after ``helm upgrade`` an operator can meet
the CRD of an older release. A stale CRD is not harmless: the API server silently prunes status
fields its schema does not declare (kopf #574), so a newer operator's results would vanish. The
generated CRD (:func:`spx.api.crd.build_crd`) carries :data:`SCHEMA_VERSION_LABEL` =
:data:`SCHEMA_VERSION`; the operator compares the installed CRD's label with its own at start-up
(:func:`spx.controller.decide.crd_check.check_crd`) and refuses to start on a mismatch, naming the command
that fixes it (``docs/install.md`` "Upgrading").

:data:`SCHEMA_VERSION` is bumped whenever the generated schema changes, by ``scripts/regen.sh``
(``scripts/schema_version.py``) or by hand; :data:`SCHEMA_FINGERPRINT` (a hash of the CRD's ``spec``) is how
it and the tests notice a change that forgot the bump (``tests/chart/test_crd_lifecycle.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

#: Label on the CustomResourceDefinition holding :data:`SCHEMA_VERSION` (a decimal integer).
SCHEMA_VERSION_LABEL: Final = "bench.spx.dev/schema-version"
#: Version of the schema this operator was built for; bump with every change of the generated CRD.
SCHEMA_VERSION: Final = 10
#: :func:`fingerprint` of the CRD ``spec`` that :data:`SCHEMA_VERSION` names.
SCHEMA_FINGERPRINT: Final = "f0a0d77334a869da"


def fingerprint(crd_spec: Mapping[str, Any]) -> str:
    """First 16 hex digits of the SHA-256 of the CRD ``spec`` as canonical JSON (sorted keys).

    Descriptions count too: they are what ``kubectl explain`` shows, and the CRD is re-applied anyway.
    """
    canonical = json.dumps(crd_spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def labelled(crd: Mapping[str, Any], version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """A copy of a CRD manifest with :data:`SCHEMA_VERSION_LABEL` set to ``version`` (other labels kept)."""
    out = json.loads(json.dumps(crd))
    labels = out.setdefault("metadata", {}).setdefault("labels", {})
    labels[SCHEMA_VERSION_LABEL] = str(version)
    return dict(out)
