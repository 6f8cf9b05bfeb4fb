#!/usr/bin/env bash
# Set up a virtual environment in .venv with spx and its test tools. Idempotent.
#   - Debian packages: prometheus (prometheus + promtool, for the observability tests).
#   - torch: on machines without a GPU, torch==2.13.0 is installed explicitly (a CPU wheel; plain
#     `torch` would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    # the package starts a system service on some hosts; the tests start their own on loopback
    ($SUDO systemctl stop prometheus 2>/dev/null || $SUDO service prometheus stop 2>/dev/null || true) >/dev/null 2>&1
  else
    echo "warning: apt-get not found; install prometheus/promtool yourself for the observability tests" >&2
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    .venv/bin/python -m pip install -q torch
  else
    # SPX_TORCH_INDEX_URL: PyTorch's CPU wheel index, where plain PyPI would serve a CUDA build
    .venv/bin/python -m pip install -q torch==2.13.0 ${SPX_TORCH_INDEX_URL:+--index-url "$SPX_TORCH_INDEX_URL"}
  fi
fi
.venv/bin/python -m pip install -q -e ".[bench,dev]"
