"""The images' lock files (scripts/lock.sh) still cover pyproject.toml: no network, no resolution.

images/operator/requirements.lock pins every package the operator image installs; images/bench/
requirements.lock pins only what spx[bench] adds to the vllm/vllm-openai:v0.33.0 base, and its header
lists the base's packages spx relies on (resolved with vllm==0.33.0). A dependency added to or
re-bounded in pyproject.toml without `scripts/lock.sh` fails here, naming the package.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_LOCK = ROOT / "images" / "operator" / "requirements.lock"
BENCH_LOCK = ROOT / "images" / "bench" / "requirements.lock"
# the bench image's base keeps these (vLLM's CUDA torch and what it was built with): never in the bench lock
BASE_ONLY = {"torch", "numpy", "vllm"}


@dataclass(frozen=True)
class Lock:
    pins: dict[str, Version]  # name -> the exact version pinned
    hashes: dict[str, list[str]]  # name -> its sha256 hashes
    base: dict[str, Version]  # bench lock header: packages left to the vLLM base -> version resolved with vllm
    differs: dict[str, tuple[Version, Version]]  # bench lock header: name -> (here, in the operator lock)


def _read(path: Path) -> Lock:
    """Parse pip-compile's output (as scripts/lock.sh writes it): `name==version \\` then `--hash=sha256:...` lines."""
    text = path.read_text()
    pins: dict[str, Version] = {}
    hashes: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if match := re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line):
            current = canonicalize_name(match[1])
            assert current not in pins, f"{path.name}: {current} pinned twice"
            pins[current], hashes[current] = Version(match[2]), []
        elif current is not None and (h := re.match(r"\s+--hash=sha256:([0-9a-f]{64})\b", line)):
            hashes[current].append(h[1])
        elif line and not line.startswith((" ", "#")):
            raise AssertionError(f"{path.name}: not a pin of scripts/lock.sh: {line[:120]!r}")
    base = {canonicalize_name(n): Version(v) for n, v in re.findall(r"^#   base: (\S+)==(\S+)", text, re.M)}
    differs = {canonicalize_name(n): (Version(v), Version(w))
               for n, v, w in re.findall(r"^#   differs: (\S+)==(\S+) \(operator image: \S+==(\S+)\)", text, re.M)}
    return Lock(pins, hashes, base, differs)


def _requirements(extra: str | None = None) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + (project["optional-dependencies"][extra] if extra else [])
    return [Requirement(r) for r in listed]


@pytest.fixture(scope="module")
def operator_lock() -> Lock:
    return _read(OPERATOR_LOCK)


@pytest.fixture(scope="module")
def bench_lock() -> Lock:
    return _read(BENCH_LOCK)


@pytest.mark.parametrize("path", [OPERATOR_LOCK, BENCH_LOCK], ids=["operator", "bench"])
def test_every_pin_is_exact_with_hashes(path: Path) -> None:
    lock = _read(path)
    assert len(lock.pins) >= 10, f"{path.name} pins only {sorted(lock.pins)}"
    unhashed = sorted(name for name, found in lock.hashes.items() if not found)
    assert not unhashed, f"{path.name}: no --hash for {unhashed}: run scripts/lock.sh (pip-compile --generate-hashes)"


def test_the_operator_lock_covers_spx_s_base_dependencies(operator_lock: Lock) -> None:
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in operator_lock.pins, f"pyproject.toml needs {req}, not in {OPERATOR_LOCK.name}: run scripts/lock.sh operator"
        assert req.specifier.contains(operator_lock.pins[name], prereleases=True), \
            f"{OPERATOR_LOCK.name} pins {name}=={operator_lock.pins[name]}, pyproject.toml asks {req}: run scripts/lock.sh operator"
    # the operator image holds nothing of the GPU bench
    assert not {"torch", "matplotlib", "numpy", "vllm"} & operator_lock.pins.keys()


def test_the_bench_lock_covers_spx_bench_pinned_or_from_the_vllm_base(bench_lock: Lock) -> None:
    for req in _requirements("bench"):
        name = canonicalize_name(req.name)
        if name in bench_lock.pins:
            version, where = bench_lock.pins[name], "pins"
        else:
            assert name in bench_lock.base, \
                f"pyproject.toml needs {req}: neither pinned in {BENCH_LOCK.name} nor from the vLLM base: run scripts/lock.sh bench"
            version, where = bench_lock.base[name], "records from the vLLM base"
        assert req.specifier.contains(version, prereleases=True), \
            f"{BENCH_LOCK.name} {where} {name}=={version}, pyproject.toml asks {req}: run scripts/lock.sh bench"


def test_the_bench_lock_leaves_vllm_s_closure_to_the_base(bench_lock: Lock) -> None:
    assert not BASE_ONLY & bench_lock.pins.keys(), "the spx layer must not replace vLLM, its torch or numpy"
    assert {"torch", "numpy"} <= bench_lock.base.keys()  # spx[bench] needs them: from the base
    assert not bench_lock.pins.keys() & bench_lock.base.keys(), "a package is either pinned or the base's"
    # what spx[bench] adds beyond vLLM: the operator's Kubernetes client and the plots
    assert {"kopf", "kubernetes", "matplotlib"} <= bench_lock.pins.keys()


def test_pins_both_locks_hold_agree_or_the_bench_lock_says_why(operator_lock: Lock, bench_lock: Lock) -> None:
    for name in sorted(operator_lock.pins.keys() & bench_lock.pins.keys()):
        here, there = bench_lock.pins[name], operator_lock.pins[name]
        if here != there:
            assert bench_lock.differs.get(name) == (here, there), \
                f"{name}: {here} in the bench lock, {there} in the operator lock, not explained: run scripts/lock.sh (both)"
    for name, (here, there) in bench_lock.differs.items():  # an explanation is current
        assert (bench_lock.pins.get(name), operator_lock.pins.get(name)) == (here, there), name


def test_the_bench_image_installs_its_lock_hash_checked_and_pip_checks() -> None:
    dockerfile = (ROOT / "images" / "bench" / "Dockerfile").read_text()
    assert "COPY images/bench/requirements.lock /tmp/requirements.lock" in dockerfile
    install = re.search(r"pip install (.*) -r /tmp/requirements\.lock", dockerfile)
    assert install is not None and {"--require-hashes", "--no-deps"} <= set(install[1].split())
    assert "pip install --no-cache-dir --no-deps /opt/spx/src" in dockerfile  # spx itself resolves nothing
    assert dockerfile.count("python3 -m pip check") == 2  # before and after: the layer adds no broken requirement
    # the lock was resolved with the vllm the base holds (scripts/lock.sh reads the base's tag)
    base = re.search(r"^ARG VLLM_BASE=vllm/vllm-openai:v(\S+)$", dockerfile, re.M)
    assert base is not None and base[1] == "0.33.0"
    assert f"[bench] together with vllm=={base[1]}," in BENCH_LOCK.read_text(), "run scripts/lock.sh bench"
