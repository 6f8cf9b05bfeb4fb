#!/usr/bin/env bash
# The pad-free shard against vLLM 0.33's sp_shard on one Hopper GPU (examples/results/<gpu>-1gpu-pad-free/):
#   1. the environment (GPU, driver, torch/NCCL, humming-kernels, host CPU);
#   2. the kernel sweep (`spx run` of the DeepSeek-V4.1 TP8 example, Humming MXFP8, CUPTI spans, no
#      refinement; the gather modelled with one GPU) over aligned and off-aligned counts, twice: every
#      point carries the three candidates (replicated, split = sp_shard, pad-free = rank TP - 1's shard);
#   3. benchmarks/eager_step.py: 40-layer eager steps of the three arms, per-arm closures and one step
#      switched between arms per step, side by side.
#
#   bash benchmarks/pad_free.sh OUT_DIR [SECONDS]     # default 480 s; the step bench gets 40 % of it
#
# Wheels in ${SPX_WHEELS:-.whl}/ (humming-kernels, pydantic, pydantic-core, annotated-types,
# typing-inspection) are installed into /tmp/site first. SPX_TOKENS overrides the sweep's counts,
# SPX_STEP_ARGS adds eager_step.py arguments. Results: OUT_DIR/env.log, run.log, sweep-1/ and sweep-2/
# (status.json, result.json), eager_step.json, eager_step.csv.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: pad_free.sh OUT_DIR [SECONDS]}
BUDGET=${2:-480}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W="$OUT/work"; mkdir -p "$W"
source benchmarks/gpu_env.sh
gpu_env_setup || exit 1
gpu_env_log > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
start=$(date +%s)
run() {  # run NAME CMD...: unless past the budget; output and timing to run.log
  local name=$1; shift
  if (( $(date +%s) - start > BUDGET )); then echo "== $name: skipped (past ${BUDGET} s)" | tee -a "$OUT/run.log"; return; fi
  echo "== $name ($(( $(date +%s) - start )) s)" | tee -a "$OUT/run.log"
  local t0=$(date +%s); "$@" 2>&1 | tee -a "$OUT/run.log"; echo "rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - t0 )) s" | tee -a "$OUT/run.log"
}
python3 - examples/deepseek-v41-tp8.yaml "$W/sweep.yaml" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
doc["spec"]["sweep"].pop("refine", None)
yaml.safe_dump(doc, open(sys.argv[2], "w"), sort_keys=False)
PY
TOKENS=${SPX_TOKENS:-2048,2049,2052,2055,4096,4097,8184,8185,8191,8192}
for i in 1 2; do
  run "kernel sweep $i" python3 -m spx run "$W/sweep.yaml" --gemm-backend humming --tokens "$TOKENS" --out "$W/sweep-$i" --overwrite
  mkdir -p "$OUT/sweep-$i"; for f in status.json result.json; do [ -f "$W/sweep-$i/$f" ] && cp "$W/sweep-$i/$f" "$OUT/sweep-$i/"; done
done
STEP_BUDGET=$(( BUDGET * 40 / 100 ))
run "eager step" python3 benchmarks/eager_step.py --out "$W/step" --budget-s "$STEP_BUDGET" \
  --tokens 2048,2049,8185,8192 --fillers 0,100,400 --host-ops 0 --steps 30 ${SPX_STEP_ARGS:-}
cp "$W/step/eager_step.csv" "$W/step/eager_step.json" "$OUT/" 2>/dev/null
nvidia-smi --query-gpu=name,clocks.current.sm,clocks.current.memory,temperature.gpu,power.draw --format=csv >> "$OUT/env.log" 2>&1
rm -rf "$W"
ls -la "$OUT" "$OUT"/sweep-*
