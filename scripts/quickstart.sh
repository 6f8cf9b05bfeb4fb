#!/usr/bin/env bash
# The main job on its embedded default: set up what `spx run` needs (no apt, no root), then run the
# kernel benchmark. With NVIDIA GPUs: the DeepSeek-V4.1 TP8 experiment; without: the CPU smoke run
# (2 gloo ranks), then where to go next. Extra arguments go to `spx run`.
# The CPU smoke run replaces spx-out on every call (its timings are not worth keeping); a GPU run never
# replaces an earlier one: spx refuses an spx-out that holds a run and says so — pass `--out DIR` for
# a new directory or `--overwrite` to replace it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --quickstart
if command -v nvidia-smi >/dev/null 2>&1 && .venv/bin/python -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  exec .venv/bin/spx run examples/deepseek-v41-tp8.yaml --out spx-out "$@"
else
  rc=0; .venv/bin/spx run examples/quickstart.yaml --out spx-out --overwrite "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then  # the run completed (its verdict is in the report): where to go from here
    cat >&2 <<'EOF'

quickstart: the CPU smoke run worked; it checks the pipeline, its timings say nothing about GPUs.
Next: on a Hopper GPU host, `bash scripts/quickstart.sh` measures DeepSeek-V4.1's projection
(examples/deepseek-v41-tp8.yaml); `.venv/bin/spx report spx-out` prints this run again and
`.venv/bin/spx gate spx-out` turns it into an exit code; docs/first-experiment.md walks through it.
EOF
  fi
  exit "$rc"
fi
