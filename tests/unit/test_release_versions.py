"""One version everywhere scripts/release.sh stamps it: the package, spx.__version__, the chart's version
and appVersion, the Dockerfiles' VERSION default and the tag the runbook links point at."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

import spx

ROOT = Path(__file__).resolve().parents[2]


def test_every_version_is_the_package_s() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "charts" / "spx-operator" / "Chart.yaml").read_text())
    assert spx.__version__ == version
    assert chart["version"] == version and chart["appVersion"] == version
    for dockerfile in ("operator", "bench"):
        text = (ROOT / "images" / dockerfile / "Dockerfile").read_text()
        assert re.search(rf"^ARG VERSION={re.escape(version)}$", text, re.M), dockerfile
    rules = (ROOT / "charts" / "spx-operator" / "rules" / "spx-rules.yaml").read_text()
    assert set(re.findall(r"/blob/v([^/]+)/docs/runbooks/", rules)) == {version}


def test_the_release_bump_touches_every_place_this_test_reads() -> None:
    script = (ROOT / "scripts" / "release.sh").read_text()
    for path in ("pyproject.toml", "operator/spx/__init__.py", "charts/spx-operator/Chart.yaml",
                 "charts/spx-operator/rules/spx-rules.yaml", "images/operator/Dockerfile", "images/bench/Dockerfile"):
        assert path in script, path
