#!/usr/bin/env bash
# Regenerate both images' lock files, pinned with hashes, resolved by pip-tools (dev: pip install pip-tools):
#
#   scripts/lock.sh            # both: images/operator/requirements.lock and images/bench/requirements.lock
#   scripts/lock.sh operator   # or only one of them
#   scripts/lock.sh bench
#
# images/operator/requirements.lock: every package the operator image installs (spx's base dependencies,
#   no extras). The image installs it with `pip install --require-hashes`, then spx itself with --no-deps.
#
# images/bench/requirements.lock: ONLY what spx[bench] adds to the vllm/vllm-openai:v0.33.0 base. How:
#   1. pip-compile resolves spx's base + `bench` dependencies TOGETHER with vllm==0.33.0 (the package the
#      base image holds; its metadata comes from the index, the ~400 MB wheel is not downloaded), so
#      every pin is one vLLM 0.33.0's own requirements accept;
#   2. every package of vllm==0.33.0's closure is dropped: found by walking pip-compile's `# via`
#      annotations down from vllm (torch, numpy, pydantic, aiohttp, ... and torch's CUDA packages). The
#      base brings those and they stay the base's: the spx layer must not replace vLLM's CUDA torch or
#      anything vLLM was built and tested with. What is left is needed by spx alone (kopf, kubernetes,
#      matplotlib and their own dependencies);
#   3. the lock's header lists the base's packages the spx layer relies on (spx's own requirements and
#      those of the locked packages that vllm's closure satisfies), with the version this resolution
#      saw. The base image's own versions may differ (it was resolved the day vLLM built it), so
#      images/bench/Dockerfile installs the lock with `--require-hashes --no-deps`, spx with --no-deps,
#      and fails the build when `pip check` then reports a broken requirement the base did not have.
#   Pins of packages both locks hold normally agree (one index, one run); where vLLM's requirements make
#   them differ, the bench lock's header says so, and tests/unit/test_image_locks.py accepts only that.
# Resolution uses this Python (3.11, as the operator image and the CI stand-in vLLM base; the real vLLM
# image has 3.12): a pin's hashes cover every wheel of that version, so the lock installs on either.
# Resolving vllm==0.33.0's metadata takes a few minutes on 2 cores (the operator lock about 30 s).
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
  echo "$VLLM" > "$work/vllm.in"
  compile --extra bench --output-file bench-all.lock pyproject.toml vllm.in
  python3 - "$work/bench-all.lock" images/operator/requirements.lock "$VLLM" > "$work/bench.lock" <<'EOF'
import re, sys

def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()

def blocks(path: str) -> tuple[list[str], dict[str, list[str]]]:
    """pip-compile's output: (header comment lines, {name: the requirement's lines})."""
    header, found, current = [], {}, None
    for line in open(path).read().splitlines():
        if re.match(r"[A-Za-z0-9]", line):
            current = canon(line.split("==")[0])
            found[current] = [line]
        elif current is not None and line.startswith(" "):
            found[current].append(line)
        elif not found:
            header.append(line)
        else:  # pip-compile's trailing "unsafe packages" comments (setuptools, pip): not installed by a lock
            current = None
    return header, found

def parents(lines: list[str]) -> set[str]:
    """The names in a block's `# via` annotation ("-r vllm.in" is vllm's input; "spx-operator (pyproject.toml)")."""
    text = " ".join(line.strip().lstrip("#").strip() for line in lines if line.strip().startswith("#"))
    text = text.removeprefix("via").replace("-r vllm.in", "vllm-input")
    return {canon(word) for word in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*(?= \(|\s|$)", text)} - {"pyproject-toml"}

def pin(lines: list[str]) -> str:
    return lines[0].split()[0]

header, everything = blocks(sys.argv[1])
operator_lock = blocks(sys.argv[2])[1]
vllm = canon(sys.argv[3].split("==")[0])
via = {name: parents(lines) for name, lines in everything.items()}
assert vllm in everything and "vllm-input" in via[vllm], f"{sys.argv[3]} not resolved: {sorted(everything)[:20]}"
closure, todo = {vllm}, [vllm]  # vllm and everything it needs, transitively
while todo:
    parent = todo.pop()
    for name, names in via.items():
        if parent in names and name not in closure:
            closure.add(name)
            todo.append(name)
kept = {name: lines for name, lines in everything.items() if name not in closure}
# the base's packages the spx layer relies on: spx's requirements and the kept packages' that vllm's closure holds
relied = {name: sorted(via[name] - closure - {"vllm-input"}) for name in sorted(closure)}
relied = {name: users for name, users in relied.items() if users}
differs = {name: (pin(lines), pin(operator_lock[name])) for name, lines in kept.items()
           if name in operator_lock and pin(lines) != pin(operator_lock[name])}
for line in header:  # pip-compile's own (its Python's version), the command replaced by this script's
    if line.startswith("#    pip-compile "):
        print(f"#    scripts/lock.sh (pip-compile --generate-hashes on pyproject.toml --extra bench with {sys.argv[3]},")
        line = "#    then vllm's own closure dropped: the vLLM base brings it)"
    print(line)
print(f"# Provided by the vLLM base, not pinned here (the version resolved with {sys.argv[3]}; needed by):")
for name, users in relied.items():
    print(f"#   base: {pin(everything[name])}  ({', '.join(users)})")
if differs:
    print(f"# Pinned apart from images/operator/requirements.lock (this resolution includes {sys.argv[3]}'s requirements):")
    for name, (here, there) in sorted(differs.items()):
        print(f"#   differs: {here} (operator image: {there})")
print("#")
for name in sorted(kept):
    print("\n".join(kept[name]))
EOF
  mkdir -p images/bench
  cp "$work/bench.lock" images/bench/requirements.lock
  echo "wrote images/bench/requirements.lock ($(grep -c '^[a-z0-9]' images/bench/requirements.lock) pins; $(grep -c '^#   base: ' images/bench/requirements.lock) packages left to the vLLM base)"
fi
