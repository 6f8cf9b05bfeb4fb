"""The release, checked statically (no registry, no docker, no OIDC identity here):

- ``scripts/release.sh --help`` prints its usage and exits 0; no argument is a usage error (exit 2);
- every action of ``.github/workflows/release.yml`` is pinned by a full 40-hex commit SHA with its tag in a
  comment (the SHAs were read from the actions' own repositories' tags; a tag or branch ref is refused);
- the workflow may mint an OIDC token (``id-token: write``), installs cosign and asks release.sh to sign;
  release.sh signs both images and the chart by digest, keyless (``cosign sign --yes REF@DIGEST``), and
  the chart README tells how to verify with the same identity and issuer;
- the base images come from ``images/base-images.lock`` (the Dockerfiles' base ARGs name the same tags),
  release.sh no longer resolves a tag while releasing, and a lock line without a digest stops it (run
  here on a clean clone of the repository: it exits 2 naming the lock).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from spx_testing.chartlib import CHART, ROOT

RELEASE = ROOT / "scripts" / "release.sh"
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
LOCK = ROOT / "images" / "base-images.lock"


def test_help_prints_the_usage_and_exits_0() -> None:
    proc = subprocess.run(["bash", str(RELEASE), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "scripts/release.sh 0.2.0 --bump" in proc.stdout and "--lock-bases" in proc.stdout
    assert "semver" not in proc.stderr
    assert subprocess.run(["bash", str(RELEASE), "-h"], capture_output=True, timeout=30).returncode == 0
    bare = subprocess.run(["bash", str(RELEASE)], capture_output=True, text=True, timeout=30)
    assert bare.returncode == 2 and "scripts/release.sh" in bare.stderr
    bad = subprocess.run(["bash", str(RELEASE), "not-a-version"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "VERSION must be semver" in bad.stderr


def test_every_action_is_pinned_by_commit_sha() -> None:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["release"]["steps"]
    uses = [s["uses"] for s in steps if "uses" in s]
    assert uses, "no actions?"
    for ref in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), f"{ref}: pin by the full commit SHA"
    for line in WORKFLOW.read_text().splitlines():
        if "uses:" in line:
            assert re.search(r"@[0-9a-f]{40} # v\d+\.\d+\.\d+$", line), f"name the tag of the SHA: {line.strip()}"
    assert {u.split("@")[0] for u in uses} >= {"actions/checkout", "sigstore/cosign-installer"}


def test_images_and_chart_are_signed_keyless_and_the_readme_says_how_to_verify() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow["permissions"]["id-token"] == "write"
    (release_step,) = [s for s in workflow["jobs"]["release"]["steps"] if s.get("name") == "release"]
    assert release_step["env"]["SIGN"] == "1" and "scripts/release.sh" in release_step["run"]
    script = RELEASE.read_text()
    assert 'cosign sign --yes "$1"' in script
    for ref in ('sign "$REGISTRY/spx-operator@$OPERATOR_DIGEST"', 'sign "$REGISTRY/spx-bench@$BENCH_DIGEST"',
                'sign "$REGISTRY/charts/spx-operator@$CHART_DIGEST"'):
        assert ref in script, ref
    readme = (CHART / "README.md").read_text()
    assert "cosign verify ghcr.io/spx-dev/spx-operator@sha256:" in readme
    assert "--certificate-oidc-issuer https://token.actions.githubusercontent.com" in readme
    identity = re.search(r"--certificate-identity-regexp '([^']+)'", readme)
    assert identity and re.search(identity.group(1),
                                  "https://github.com/spx-dev/spx/.github/workflows/release.yml@refs/tags/v0.1.0")


def test_the_base_images_come_from_the_committed_lock() -> None:
    entries = dict(line.split("=", 1) for line in LOCK.read_text().splitlines() if line and not line.startswith("#"))
    assert set(entries) == {"PYTHON_BASE", "VLLM_BASE"}
    for name, dockerfile in (("PYTHON_BASE", "operator"), ("VLLM_BASE", "bench")):
        text = (ROOT / "images" / dockerfile / "Dockerfile").read_text()
        default = re.search(rf"^ARG {name}=(\S+)$", text, re.M)
        assert default and entries[name].split("@")[0] == default.group(1), (name, entries[name])
    script = RELEASE.read_text()
    assert "locked_base PYTHON_BASE" in script and "locked_base VLLM_BASE" in script
    assert "PYTHON_BASE_TAG" not in script  # no tag resolved at release time any more
    assert 'digest_of "${BASH_REMATCH[2]}"' in script  # only --lock-bases resolves, into the lock


def test_a_base_without_a_digest_stops_the_release(tmp_path: Path) -> None:
    """The lock as committed here names tags without digests (no registry could be reached to resolve
    them): the release refuses, naming the lock and the command that fills it."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True, timeout=120)
    for rel in ("scripts/release.sh", "images/base-images.lock"):  # the working tree's, committed or not
        shutil.copy(ROOT / rel, repo / rel)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, timeout=60)
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "wip",
                    "--allow-empty"], check=True, timeout=60)
    version = re.search(r'^version = "([^"]+)"', (repo / "pyproject.toml").read_text(), re.M)
    assert version
    lock = (repo / "images" / "base-images.lock").read_text()
    if re.search(r"^PYTHON_BASE=\S+@sha256:[0-9a-f]{64}$", lock, re.M):
        (repo / "images" / "base-images.lock").write_text(re.sub(r"^(PYTHON_BASE=[^@\n]+)@\S+", r"\1", lock, flags=re.M))
        subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "unpin"],
                       check=True, timeout=60)
    proc = subprocess.run(["bash", "scripts/release.sh", version.group(1)], cwd=repo, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PUSH": "0", "HOME": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "images/base-images.lock: PYTHON_BASE is not pinned by digest" in proc.stderr, proc.stderr
    assert "--lock-bases" in proc.stderr
