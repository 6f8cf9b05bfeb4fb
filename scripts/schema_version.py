"""Bump the CRD's schema version when the generated schema changed (run by scripts/regen.sh before ``spx crd``).

    .venv/bin/python scripts/schema_version.py      # prints the version, bumped or not

Compares :func:`spx.api.crd_version.fingerprint` of the generated CRD's ``spec`` with
``SCHEMA_FINGERPRINT`` in ``operator/spx/api/crd_version.py``; on a difference it writes
``SCHEMA_VERSION + 1`` and the new fingerprint there, so every schema change carries a new version (the
operator refuses the CRD of another: ``spx.controller.decide.crd_check``). ``tests/chart/test_crd_lifecycle.py``
fails when the two disagree, i.e. when this was not run.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from spx.api import crd_version
from spx.api.crd import build_crd

SOURCE = Path(__file__).resolve().parents[1] / "operator" / "spx" / "api" / "crd_version.py"


def main() -> int:
    now = crd_version.fingerprint(build_crd()["spec"])
    if now == crd_version.SCHEMA_FINGERPRINT:
        print(f"schema version {crd_version.SCHEMA_VERSION} (unchanged)")
        return 0
    text = SOURCE.read_text(encoding="utf-8")
    version = crd_version.SCHEMA_VERSION + 1
    text, n_version = re.subn(r"^SCHEMA_VERSION: Final = \d+$", f"SCHEMA_VERSION: Final = {version}", text, flags=re.M)
    text, n_print = re.subn(r'^SCHEMA_FINGERPRINT: Final = "[0-9a-f]+"$', f'SCHEMA_FINGERPRINT: Final = "{now}"', text,
                            flags=re.M)
    if (n_version, n_print) != (1, 1):
        print(f"{SOURCE}: expected one `SCHEMA_VERSION: Final = N` and one `SCHEMA_FINGERPRINT: Final = \"…\"` line",
              file=sys.stderr)
        return 1
    SOURCE.write_text(text, encoding="utf-8")
    print(f"schema version {version} (the generated schema changed: fingerprint {now})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
