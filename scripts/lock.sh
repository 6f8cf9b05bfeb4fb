#!/usr/bin/env bash
# Regenerate both images' lock files, pinned with hashes (operator: pip-tools' pip-compile, a dev dependency; bench: pip):
#
#   scripts/lock.sh            # both: images/operator/requirements.lock and images/bench/requirements.lock
#   scripts/lock.sh operator   # or only one of them
#   scripts/lock.sh bench
#
# images/operator/requirements.lock: every package the operator image installs (spx's base dependencies,
#   no extras). The image installs it with `pip install --require-hashes`, then spx itself with --no-deps.
#
# images/bench/requirements.lock: ONLY what spx[bench] adds to the vllm/vllm-openai:v0.33.0 base. How:
#   1. pip's resolver (`pip install --dry-run --report`, metadata only via PEP 658) resolves spx's base +
#      `bench` dependencies TOGETHER with vllm==0.33.0 (the version of the Dockerfile's VLLM_BASE tag), so
#      every pin is one vLLM 0.33.0's own requirements accept. (pip-compile was tried first: it spent over
#      10 minutes on vLLM's tree of CUDA wheels without finishing on a 2-core machine; pip takes ~2 min);
#   2. every package of vllm==0.33.0's closure is dropped: walked down the report's Requires-Dist
#      (markers evaluated) from vllm (torch, numpy, pydantic, aiohttp, ... and torch's CUDA packages). The
#      base brings those and they stay the base's: the spx layer must not replace vLLM's CUDA torch or
#      anything vLLM was built and tested with. What is left is needed by spx alone (kopf, kubernetes,
#      matplotlib and their own dependencies), each pinned with the sha256 of EVERY file of that version
#      (PyPI's JSON API), so the lock installs on the real image's Python 3.12 as on 3.11;
#   3. the lock's header lists the base's packages the spx layer relies on (spx's own requirements and
#      those of the locked packages that vllm's closure satisfies), with the version this resolution
#      saw. The base image's own versions may differ (it was resolved the day vLLM built it), so
#      images/bench/Dockerfile installs the lock with `--require-hashes --no-deps`, spx with --no-deps,
#      and fails the build when `pip check` then reports a broken requirement the base did not have.
#   Pins of packages both locks hold normally agree (one index, one run); where vLLM's requirements make
#   them differ, the bench lock's header says so, and tests/unit/test_image_locks.py accepts only that.
# Resolution uses this Python (3.11, as the operator image and the CI stand-in vLLM base; the real vLLM
# image has 3.12): a pin's hashes cover every wheel of that version, so the lock installs on either.
# The bench lock takes ~3 min on 2 cores (needs network to the index and PyPI's JSON API), the operator one ~30 s.
# tests/unit/test_image_locks.py fails when a lock no longer covers pyproject.toml's dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
# the vllm package of the bench image's base: the version of images/bench/Dockerfile's VLLM_BASE tag (v0.33.0)
VLLM=vllm==$(sed -n 's|^ARG VLLM_BASE=vllm/vllm-openai:v\([0-9][0-9.]*\)$|\1|p' images/bench/Dockerfile)
[ "$VLLM" != vllm== ] || { echo "lock.sh: no 'ARG VLLM_BASE=vllm/vllm-openai:v<version>' in images/bench/Dockerfile" >&2; exit 2; }
which=${1:-all}
case $which in all | operator | bench) ;; *) echo "usage: scripts/lock.sh [operator|bench]" >&2; exit 2 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp pyproject.toml README.md "$work/" && cp -r operator "$work/"
compile() { (cd "$work" && pip-compile --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links "$@"); }

if [ "$which" != bench ]; then
  compile --output-file operator.lock pyproject.toml
  sed 's|^#    pip-compile .*|#    scripts/lock.sh (pip-compile --generate-hashes on pyproject.toml, base dependencies only)|' \
    "$work/operator.lock" > images/operator/requirements.lock
  echo "wrote images/operator/requirements.lock"
fi

if [ "$which" != operator ]; then
  # pip's resolver (metadata only, PEP 658): pip-compile spent over 10 min on vLLM's tree of CUDA wheels here
  .venv/bin/python -m pip install -q --dry-run --ignore-installed --report "$work/report.json" "$VLLM" "$work[bench]" \
    2> >(grep -v 'is ignored: it is neither' >&2)
  .venv/bin/python - "$work/report.json" images/operator/requirements.lock "$VLLM" > "$work/bench.lock" <<'EOF'
import json, re, sys, urllib.request
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canon

report = json.load(open(sys.argv[1]))
meta = {canon(i["metadata"]["name"]): i["metadata"] for i in report["install"]}
vllm, spx = canon(sys.argv[3].split("==")[0]), "spx-operator"
def needs(name: str, extra: str = "") -> set[str]:
    reqs = (Requirement(r) for r in meta[name].get("requires_dist", []))
    return {canon(r.name) for r in reqs if r.marker is None or r.marker.evaluate({"extra": extra})} & meta.keys()
def closure(roots: set[str]) -> set[str]:
    seen, todo = set(roots), list(roots)
    while todo:
        for child in needs(todo.pop()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen
base = closure({vllm})  # vllm and everything it needs, transitively: the base brings it
kept = closure(needs(spx, "bench")) - base
users = {n: sorted(u for u in kept | {spx} if n in needs(u, "bench" if u == spx else "")) for n in meta}
operator_pins = dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+) ", open(sys.argv[2]).read(), re.M))
print(f"#\n# This file is autogenerated by scripts/lock.sh with Python {sys.version_info[0]}.{sys.version_info[1]}:")
print(f"#    pip's resolver on pyproject.toml [bench] together with {sys.argv[3]}, then vllm's own closure")
print("#    dropped (the vLLM base brings it); hashes of every file of each pinned version from PyPI")
print("#")
print(f"# Provided by the vLLM base, not pinned here (the version resolved with {sys.argv[3]}; needed by):")
for name in sorted(base):
    if users[name]:
        print(f"#   base: {name}=={meta[name]['version']}  ({', '.join(users[name])})")
differs = {n: operator_pins[n] for n in kept if n in operator_pins and operator_pins[n] != meta[n]["version"]}
if differs:
    print(f"# Pinned apart from images/operator/requirements.lock (this resolution includes {sys.argv[3]}'s requirements):")
    for name in sorted(differs):
        print(f"#   differs: {name}=={meta[name]['version']} (operator image: {name}=={differs[name]})")
print("#")
for name in sorted(kept):
    version = meta[name]["version"]
    with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=60) as response:
        files = json.load(response)["releases"][version]
    digests = sorted({f["digests"]["sha256"] for f in files})
    assert digests, f"no files of {name}=={version} on PyPI"
    print(f"{name}=={version} \\")
    print(" \\\n".join(f"    --hash=sha256:{d}" for d in digests))
    print(f"    # via {', '.join(users[name])}")
EOF
  mkdir -p images/bench
  cp "$work/bench.lock" images/bench/requirements.lock
  echo "wrote images/bench/requirements.lock ($(grep -c '^[a-z0-9]' images/bench/requirements.lock) pins; $(grep -c '^#   base: ' images/bench/requirements.lock) packages left to the vLLM base)"
fi
