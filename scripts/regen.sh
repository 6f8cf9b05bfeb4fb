#!/usr/bin/env bash
# Regenerate every checked-in generated file (tests fail when these drift from the code).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python scripts/schema_version.py   # bumps operator/spx/api/crd_version.py when the schema changed
.venv/bin/spx crd > crds/shardedprojectionexperiments.yaml
cp crds/shardedprojectionexperiments.yaml charts/spx-operator/crds/shardedprojectionexperiments.yaml
.venv/bin/python -m spx.tools.dashboard --write charts/spx-operator/dashboards/spx.json
.venv/bin/python -m spx.cli.documents docs/schemas
