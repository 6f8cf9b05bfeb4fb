#!/usr/bin/env bash
# Regenerate images/operator/requirements.lock: every package the operator image installs (spx's base
# dependencies, no extras), pinned with hashes, resolved by pip-tools (dev: pip install pip-tools).
# The image installs it with `pip install --require-hashes`, then spx itself with --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp pyproject.toml README.md "$work/" && cp -r operator "$work/"
(cd "$work" && pip-compile --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links \
  --output-file requirements.lock pyproject.toml)
sed 's|^#    pip-compile .*|#    scripts/lock.sh (pip-compile --generate-hashes on pyproject.toml, base dependencies only)|' \
  "$work/requirements.lock" > images/operator/requirements.lock
echo "wrote images/operator/requirements.lock"
