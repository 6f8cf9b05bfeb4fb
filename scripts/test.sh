#!/usr/bin/env bash
# The test command (README): set up, then lint, type-check, check the layering, run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check operator tests benchmarks
echo "== mypy (strict on spx.api and spx.analysis)"; mypy operator/spx/api operator/spx/analysis
echo "== import-linter"; lint-imports
echo "== pytest (real control plane: ${KUBEBUILDER_ASSETS:-KUBEBUILDER_ASSETS unset, those tests skip})"; pytest -q -p no:cacheprovider "$@"
