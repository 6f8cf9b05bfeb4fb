#!/usr/bin/env bash
# The eager-step measurement behind examples/results/<gpu>-1gpu-eager-step/, in one go on one Hopper GPU:
#   1. the environment: GPU, driver, torch/NCCL, humming-kernels, host CPU (lscpu): eager host times belong to it;
#   2. benchmarks/eager_step.py: 40-layer eager steps (Humming projection replicated vs split with a
#      real 1-rank NCCL all-gather launch, host ops, a GPU-only filler), the step effect per layer
#      against the per-op Δg and Δh, at 2048, 8192 and 2049 tokens;
#   3. the landed eager sweep (`spx run` of the DeepSeek-V4.1 TP8 example, kernel.execution eager, no
#      refinement, humming) whose split host samples now include the real 1-rank gather launch;
#   4. benchmarks/gather_host_issue.py: the launch alone.
#
#   bash benchmarks/eager_step.sh OUT_DIR [SECONDS]     # default 540 s; the step bench gets 45 % of it
#
# No part starts after SECONDS (listed as skipped). Wheels in ${SPX_WHEELS:-.whl}/ are installed into
# /tmp/site first (machines without a package index). Results: OUT_DIR/eager-step.tar.gz, env.log, run.log,
# eager_step.csv, eager_step.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: eager_step.sh OUT_DIR [SECONDS]}
BUDGET=${2:-540}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W="$OUT/work"; mkdir -p "$W"
source benchmarks/gpu_env.sh
gpu_env_setup || exit 1
gpu_env_log > "$W/env.log" 2>&1
cat "$W/env.log"
start=$(date +%s)
run() {  # run NAME CMD...: unless past the budget; output and timing to run.log
  local name=$1; shift
  if (( $(date +%s) - start > BUDGET )); then echo "== $name: skipped (past ${BUDGET} s)" | tee -a "$W/run.log"; return; fi
  echo "== $name ($(( $(date +%s) - start )) s)" | tee -a "$W/run.log"
  local t0=$(date +%s); "$@" 2>&1 | tee -a "$W/run.log"; echo "rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - t0 )) s" | tee -a "$W/run.log"
}
SPEC=examples/deepseek-v41-tp8.yaml
python3 - "$SPEC" "$W/eager.yaml" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
doc["spec"]["kernel"]["execution"] = "eager"
doc["spec"]["sweep"].pop("refine", None)
yaml.safe_dump(doc, open(sys.argv[2], "w"), sort_keys=False)
PY
STEP_BUDGET=$(( BUDGET * 45 / 100 ))
run "eager step" python3 benchmarks/eager_step.py --out "$W/step" --budget-s "$STEP_BUDGET" ${SPX_STEP_ARGS:-}
run "humming eager sweep" python3 -m spx run "$W/eager.yaml" --gemm-backend humming \
  --tokens "${SPX_TOKENS:-1024,2048,2049,4096,8192}" --out "$W/humming-eager" --overwrite
run "nccl all-gather host issue" python3 benchmarks/gather_host_issue.py --tokens 2048,2049,8192
nvidia-smi --query-gpu=name,clocks.current.sm,clocks.current.memory,temperature.gpu,power.draw --format=csv >> "$W/env.log" 2>&1
cp "$W/env.log" "$W/run.log" "$OUT/"
cp "$W/step/eager_step.csv" "$W/step/eager_step.json" "$OUT/" 2>/dev/null
tar -czf "$OUT/eager-step.tar.gz" -C "$W" .
rm -rf "$W"
ls -la "$OUT"
