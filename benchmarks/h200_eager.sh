#!/usr/bin/env bash
# The execution-mode measurements behind examples/results/h200-1gpu-eager/, in one go on one H200:
#   1. the environment: GPU, driver, torch, and the host CPU (lscpu): eager host times belong to it;
#   2. per GEMM backend and repetition: the DeepSeek-V4.1 TP8 sweep with kernel.execution auto (CUDA
#      graphs up to vLLM's capture limit 512, eager above, as vLLM 0.33 runs V4.1), the same sweep all
#      eager, and the input-projection stage (python -m spx.bench.stage);
#   3. the host time to issue one NCCL all-gather (1-rank group: the launch path, not an 8-rank gather).
#
#   bash benchmarks/h200_eager.sh OUT_DIR [SECONDS] [BACKEND ...]   # default 480 s, humming torch-bf16
#
# Runs are ordered by importance and none starts after SECONDS (the rest are listed as skipped), so a
# lease's time limit never loses what ran. Wheels in .whl/ are installed into /tmp/site first (machines
# without a package index). Everything lands in OUT_DIR/h200-eager.tar.gz plus env.log and run.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: h200_eager.sh OUT_DIR [SECONDS] [BACKEND ...]}; shift
BUDGET=${1:-480}; [ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then BACKENDS=("$@"); else BACKENDS=(humming torch-bf16); fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W="$OUT/work"; mkdir -p "$W"
source benchmarks/gpu_env.sh
gpu_env_setup || exit 1
gpu_env_log > "$W/env.log" 2>&1
cat "$W/env.log"
SPEC=examples/deepseek-v41-tp8.yaml
TOKENS=${SPX_TOKENS:-6,12,24,48,96,192,384,512,768,1024,1536,2048,3072,4096,6144,8192,16384}
STAGE_TOKENS=${SPX_STAGE_TOKENS:-512,1024,1025,2048,4096,8192}
python3 - "$SPEC" "$W/eager.yaml" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
doc["spec"]["kernel"]["execution"] = "eager"
yaml.safe_dump(doc, open(sys.argv[2], "w"), sort_keys=False)
PY
start=$(date +%s)
run() {  # run NAME CMD...: unless past the budget; output and timing to run.log
  local name=$1; shift
  if (( $(date +%s) - start > BUDGET )); then echo "== $name: skipped (past ${BUDGET} s)" | tee -a "$W/run.log"; return; fi
  echo "== $name ($(( $(date +%s) - start )) s)" | tee -a "$W/run.log"
  local t0=$(date +%s); "$@" >> "$W/run.log" 2>&1; echo "rc=$? wall=$(( $(date +%s) - t0 )) s" | tee -a "$W/run.log"
}
sweep() { python3 -m spx run "$1" --gemm-backend "$2" --tokens "$TOKENS" --out "$W/$3" --overwrite; }
stage() { python3 -m spx.bench.stage "$SPEC" --gemm-backend "$1" --tokens "$STAGE_TOKENS" --out "$W/$2/stage.json"; }
B0=${BACKENDS[0]}
run "$B0 auto 1" sweep "$SPEC" "$B0" "$B0-auto-1"
run "$B0 eager 1" sweep "$W/eager.yaml" "$B0" "$B0-eager-1"
run "$B0 stage 1" stage "$B0" "$B0-stage-1"
for b in "${BACKENDS[@]:1}"; do
  run "$b auto 1" sweep "$SPEC" "$b" "$b-auto-1"
  run "$b stage 1" stage "$b" "$b-stage-1"
done
run "$B0 auto 2" sweep "$SPEC" "$B0" "$B0-auto-2"
run "$B0 stage 2" stage "$B0" "$B0-stage-2"
for b in "${BACKENDS[@]:1}"; do
  run "$b eager 1" sweep "$W/eager.yaml" "$b" "$b-eager-1"
  run "$b auto 2" sweep "$SPEC" "$b" "$b-auto-2"
done
run "$B0 eager 2" sweep "$W/eager.yaml" "$B0" "$B0-eager-2"
run "nccl all-gather host issue" python3 benchmarks/gather_host_issue.py
nvidia-smi --query-gpu=name,clocks.current.sm,clocks.current.memory,temperature.gpu,power.draw --format=csv >> "$W/env.log" 2>&1
tar -czf "$OUT/h200-eager.tar.gz" -C "$W" .
cp "$W/env.log" "$W/run.log" "$OUT/"
rm -rf "$W"
ls -la "$OUT"
