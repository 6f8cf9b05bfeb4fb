#!/usr/bin/env bash
# The measurements behind examples/results/h200-1gpu-adaptive/, in one go on one H200 (or any SM90 GPU):
#   1. benchmarks/adaptive_vs_dense.py twice (the re-run shows whether the figures reproduce),
#   2. once more with --bounds --max-added 8 (every interval end bracketed too),
#   3. Humming's tile choice per count (benchmarks/humming_tiles.py; explains the dips).
#
#   bash benchmarks/h200_adaptive.sh OUT_DIR
#
# Wheels in .whl/ are installed first when present (benchmarks/gpu_env.sh). Each step has its own
# timeout, so a slow step leaves the earlier ones' output in OUT_DIR: env.log, run1.log, run2.log,
# bounds.log, tiles.log, tiles.json and runs.tar.gz (each run's experiment.yaml, result.json,
# status.json, crossover.png, spx-run.log and summary.json).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: h200_adaptive.sh OUT_DIR}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT" /tmp/spx-adaptive
source benchmarks/gpu_env.sh
gpu_env_setup || exit 1
gpu_env_log > "$OUT/env.log" 2>&1
COUNTS=(32 48 64 80 96 128 160 192 216 256 384 512 768 1024)
step() {  # step SECONDS NAME ARGS...: one benchmark run into /tmp/spx-adaptive/NAME, its table into OUT/NAME.log
  local secs=$1 name=$2; shift 2
  echo "== $name: $*"
  timeout "$secs" python3 benchmarks/adaptive_vs_dense.py --gemm-backend humming --out "/tmp/spx-adaptive/$name" "$@" 2>&1 | tee "$OUT/$name.log"
}
step 180 run1
step 150 run2
step 150 bounds --bounds --max-added 8
echo "== humming tiles"
timeout 90 python3 benchmarks/humming_tiles.py --tokens "${COUNTS[@]}" --json "$OUT/tiles.json" 2>&1 | tee "$OUT/tiles.log"
nvidia-smi --query-gpu=name,clocks.current.sm,clocks.current.memory,temperature.gpu,power.draw --format=csv >> "$OUT/env.log" 2>&1
tar -czf "$OUT/runs.tar.gz" -C /tmp/spx-adaptive .
ls -la "$OUT"
