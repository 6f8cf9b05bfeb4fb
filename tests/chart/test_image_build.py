"""The operator image, built for real without a daemon (images/build-oci.sh: debootstrap base, kept in
SPX_OCI_CACHE for the bench build of tests/chart/test_bench_image_build.py; buildah with chroot isolation
and vfs storage) and its entry point run with --help as the image's
user. Skips where buildah/debootstrap are not installed or not root; ~2 min on a 2-core machine."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from spx_testing.chartlib import ROOT


def test_operator_image_builds_and_its_entrypoint_runs() -> None:
    missing = [t for t in ("buildah", "debootstrap") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian: apt-get install buildah debootstrap)")
    if os.geteuid() != 0:
        pytest.skip("images/build-oci.sh needs root (debootstrap, buildah's chroot isolation)")
    if os.environ.get("SPX_SKIP_IMAGE_BUILD"):
        pytest.skip("SPX_SKIP_IMAGE_BUILD is set")
    proc = subprocess.run(["bash", str(ROOT / "images" / "build-oci.sh")], capture_output=True, text=True,
                          timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "ENTRYPOINT spx, USER 10001:10001" in out, out[-4000:]
    assert "usage: spx [-h] [--version] COMMAND" in out and "usage: spx operator" in out, out[-4000:]
    assert "uid=10001(spx)" in out
