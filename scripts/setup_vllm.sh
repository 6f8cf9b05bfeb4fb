#!/usr/bin/env bash
# Install the real vLLM (default 0.33.0, SPX_VLLM_VERSION overrides) into .venv on a CPU machine, for
# the tests marked `vllm` (`pytest -m vllm`). Idempotent; run after scripts/setup.sh. ~15 min on 2 cores.
#
# The vllm wheel pins a CUDA torch (torch==2.14.0) and GPU-only packages (humming-kernels, flashinfer,
# CUTLASS DSL, ...), none of which install on a CPU machine. So:
#   1. keep the CPU torch scripts/setup.sh installed (torch==2.13.0), pinned by a constraints file so
#      no requirement can replace it with a multi-GB CUDA build;
#   2. install the wheel's other requirements (its METADATA's Requires-Dist, markers evaluated, no
#      extras) minus GPU_ONLY below;
#   3. install the wheel itself with --no-deps.
# `import vllm`, VLLM_TARGET_DEVICE=cpu, vLLM's CLI parsers and its layer classes then work; GPU kernels
# do not (no CUDA ops). Nothing is cached outside pip's own cache: the wheel goes to a temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${SPX_VLLM_VERSION:-0.33.0}
# SPX_VLLM_PYTHON: another Python to install into (images/build-bench-oci.sh: the stand-in vLLM image's system Python)
PY=${SPX_VLLM_PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "setup_vllm.sh: run scripts/setup.sh first (no $PY)" >&2; exit 1; }
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm') != sys.argv[1])" "$VERSION" 2>/dev/null; then
  echo "vllm $VERSION already installed"
  exit 0
fi
# Requirements that need CUDA, pin a torch with no CPU wheel here, or serve only GPU code paths
# (multimedia decoders, GPU kernels, numba for n-gram speculative decoding).
GPU_ONLY="torch torchaudio torchvision torchcodec pynvvideocodec flashinfer-python apache-tvm-ffi tilelang
nvidia-cudnn-frontend nvidia-cutlass-dsl nvtx fastsafetensors instanttensor quack-kernels tokenspeed-mla
humming-kernels numba"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
"$PY" -m pip download -q --no-deps "vllm==$VERSION" -d "$tmp"
wheel=$(ls "$tmp"/vllm-"$VERSION"-*.whl)
"$PY" -c "import torch; print(f'torch=={torch.__version__.split(\"+\")[0]}')" >"$tmp/constraints.txt"
"$PY" - "$wheel" "$GPU_ONLY" >"$tmp/requirements.txt" <<'EOF'
import sys, zipfile
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

wheel, skip = sys.argv[1], {canonicalize_name(n) for n in sys.argv[2].split()}
with zipfile.ZipFile(wheel) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    lines = zf.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if canonicalize_name(req.name) in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
EOF
echo "setup_vllm.sh: installing $(wc -l <"$tmp/requirements.txt") requirements of vllm $VERSION with $(cat "$tmp/constraints.txt")"
"$PY" -m pip install -q -c "$tmp/constraints.txt" -r "$tmp/requirements.txt"
"$PY" -m pip install -q --no-deps "$wheel"
VLLM_TARGET_DEVICE=cpu "$PY" -c "import vllm; print('setup_vllm.sh: vllm', vllm.__version__, 'imports')"
echo "setup_vllm.sh: installed in $(( $(date +%s) - start )) s"
