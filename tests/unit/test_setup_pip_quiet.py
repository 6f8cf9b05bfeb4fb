"""scripts/pip_quiet.sh (sourced by scripts/setup.sh) drops exactly pip's per-package "Location
'file:///…' is ignored" warning and keeps pip's errors and exit status. Runs the real pip of this
interpreter, isolated from the machine's pip configuration (``--isolated``), against two local
``file://`` indexes: one empty, one with no ``simple/`` folder at all (the case that warns)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WARNING = "is ignored: it is neither a file nor a directory"


def pip_quiet(tmp_path: Path, *args: str, filtered: bool = True) -> subprocess.CompletedProcess[str]:
    call = f'source scripts/pip_quiet.sh && pip_quiet "{sys.executable}" "$@"' if filtered else \
        f'"{sys.executable}" -m pip "$@"'
    return subprocess.run(["bash", "-c", f"set -euo pipefail; {call}", "pip_quiet", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def indexes(tmp_path: Path) -> list[str]:
    """``--isolated`` pip reading only two local indexes: ``a`` exists but is empty, ``b`` is missing."""
    (tmp_path / "a" / "simple").mkdir(parents=True)
    return ["--isolated", "--disable-pip-version-check", "--index-url", (tmp_path / "a" / "simple").as_uri(),
            "--extra-index-url", (tmp_path / "b" / "simple").as_uri()]


def test_unfiltered_pip_prints_the_warning(tmp_path: Path, indexes: list[str]) -> None:
    """The premise: pip itself prints the line (if a pip stops doing so, the filter is moot)."""
    run = pip_quiet(tmp_path, "download", "--no-deps", "-d", str(tmp_path / "d"), *indexes, "spx-no-such-package",
                    filtered=False)
    assert WARNING in run.stderr, run.stderr


def test_the_warning_goes_and_the_error_and_status_stay(tmp_path: Path, indexes: list[str]) -> None:
    run = pip_quiet(tmp_path, "download", "--no-deps", "-d", str(tmp_path / "d"), *indexes, "spx-no-such-package")
    assert run.returncode == 1, run
    assert WARNING not in run.stderr
    assert "ERROR: Could not find a version that satisfies the requirement spx-no-such-package" in run.stderr
    assert "ERROR: No matching distribution found for spx-no-such-package" in run.stderr


def test_stdout_and_a_success_status_pass_through(tmp_path: Path) -> None:
    run = pip_quiet(tmp_path, "--version")
    assert run.returncode == 0 and run.stdout.startswith("pip ") and run.stderr == ""
