"""The chart's history from git (issue #36): earlier values trees, the previous released chart, the status
paths an earlier CRD declared. Every helper returns None where there is no history (a source tarball, a
shallow clone): the tests then skip and say so."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import yaml

from spx_testing.chartlib import ROOT

CHART_DIR = "charts/spx-operator"
CRD_FILE = "crds/shardedprojectionexperiments.yaml"
NO_HISTORY = "no git history here (a source tarball or a shallow clone): nothing earlier to compare with"


def git(*args: str, binary: bool = False) -> Any:
    """``git args`` in the repository: stdout (text, or bytes with ``binary``), None when git or the
    object is missing."""
    if shutil.which("git") is None:
        return None
    proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=not binary, timeout=120)
    return proc.stdout if proc.returncode == 0 else None


def has_history() -> bool:
    """The repository has a previous commit and is not a shallow clone."""
    return git("rev-parse", "HEAD~1") is not None and (git("rev-parse", "--is-shallow-repository") or "").strip() == "false"


def commits_touching(path: str) -> list[str]:
    """Commits (newest first, full hashes) that changed ``path``."""
    return (git("log", "--format=%H", "--", path) or "").split()


def chart_yaml(commit: str | None = None) -> dict[str, Any]:
    """Chart.yaml at ``commit``, or of the working tree."""
    if commit is None:
        return dict(yaml.safe_load((ROOT / CHART_DIR / "Chart.yaml").read_text()))
    return dict(yaml.safe_load(git("show", f"{commit}:{CHART_DIR}/Chart.yaml")))


def _introduced(version: str) -> str | None:
    """The newest commit that set Chart.yaml's version to ``version`` (its parent had another): where the
    release of that version was cut (scripts/release.sh VERSION --bump, then the tag)."""
    for commit in commits_touching(f"{CHART_DIR}/Chart.yaml"):
        parent = (git("rev-parse", f"{commit}^") or "").strip()
        if parent and chart_yaml(commit)["version"] == version and chart_yaml(parent)["version"] != version:
            return commit
    return None


def previous_release() -> str | None:
    """The chart a user of the previous chart version has installed: the commit that introduced the version
    before the working tree's (later commits that changed the chart without a bump were no release); None
    without one."""
    current = chart_yaml()["version"]
    if chart_yaml("HEAD")["version"] != current:
        return _introduced(chart_yaml("HEAD")["version"]) or str(git("rev-parse", "HEAD")).strip()
    intro = _introduced(current)
    if intro is None:
        return None
    previous = chart_yaml(f"{intro}^")["version"]
    return _introduced(previous) or (git("rev-parse", f"{intro}^") or "").strip() or None


def extract(commit: str, paths: list[str], dest: Path) -> Path:
    """``git archive commit paths`` unpacked under ``dest``; returns ``dest``."""
    data = git("archive", "--format=tar", commit, *paths, binary=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def status_paths(crd: dict[str, Any]) -> set[str]:
    """Every property path under ``status`` the CRD's schema declares (``status.kernel.points[].tokens``)."""
    def walk(node: Any, prefix: str) -> set[str]:
        out: set[str] = set()
        if not isinstance(node, dict):
            return out
        for key, child in (node.get("properties") or {}).items():
            out |= {f"{prefix}.{key}"} | walk(child, f"{prefix}.{key}")
        if "items" in node:
            out |= walk(node["items"], f"{prefix}[]")
        if isinstance(node.get("additionalProperties"), dict):
            out |= walk(node["additionalProperties"], prefix + "{}")
        return out

    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return walk(schema["properties"]["status"], "status")
