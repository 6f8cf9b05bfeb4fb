#!/usr/bin/env bash
# Does pinning the bench process to one CPU core make eager host issue times reproducible? On one H200:
# the DeepSeek-V4.1 TP8 sweep (Humming, tokens 1024, 2048, 8192: eager, above vLLM's capture limit 512;
# sweep.refine adds counts below) four times each unpinned, `taskset -c 3` and `taskset -c 11`,
# interleaved, printing per run the host issue medians (replicated/split µs) of every point.
#
#   bash benchmarks/h200_host_pinning.sh OUT_DIR        # ~8 min; wheels in .whl/ as h200_eager.sh
#
# Result on 2026-12-02: examples/results/h200-1gpu-eager/2026-12-02/host-pinning.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: h200_host_pinning.sh OUT_DIR}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
source benchmarks/gpu_env.sh
gpu_env_setup || exit 1
gpu_env_log > "$OUT/env.log" 2>&1
for i in 1 2 3 4; do
  for mode in free pin3 pin11; do
    case $mode in free) pre=();; pin3) pre=(taskset -c 3);; pin11) pre=(taskset -c 11);; esac
    "${pre[@]}" python3 -m spx run examples/deepseek-v41-tp8.yaml --gemm-backend humming --tokens 1024,2048,8192 \
      --out "$OUT/$mode-$i" > "$OUT/$mode-$i.log" 2>&1
    python3 - "$OUT/$mode-$i/status.json" "$mode" "$i" <<'PY'
import json, sys
k = json.load(open(sys.argv[1]))["kernel"]
print(sys.argv[2], sys.argv[3], " ".join(f"{p['tokens']}:{p['replicatedHostUs']:.0f}/{p['splitHostUs']:.0f}"
                                         for p in k["points"] if p.get("replicatedHostUs")))
PY
  done
done
