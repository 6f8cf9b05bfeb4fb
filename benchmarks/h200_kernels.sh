#!/usr/bin/env bash
# The kernel measurements behind examples/results/h200-1gpu/, in one go on one H200 (or any SM90 GPU):
#   1. a Humming smoke check (vLLM's MXFP8 configuration, CUDA graph, CUPTI kernel names),
#   2. the full DeepSeek-V4.1 TP8 sweep per GEMM backend through `spx run` (benchmarks/tool_speed.py:
#      wall time and spread per run; the gather is modelled with one GPU),
#   3. the do_bench cross-check of the replicated GEMM at 8192 tokens and its 1024-row shard.
#
#   bash benchmarks/h200_kernels.sh OUT_DIR [BACKEND ...]     # default backends: humming torch-bf16
#
# With marlin among the backends and no SPX_MARLIN_LIB set, vLLM 0.33.0's Marlin ops are built first
# from its sources (SPX_VLLM_SRC, default .vllm-src/vllm-0.33.0; see spx.bench.gemm.marlin_build).
#
# Needs python3 with a CUDA torch, triton, rich, matplotlib, pyyaml, numpy; wheels in .whl/ (pydantic,
# pydantic-core, annotated-types, typing-inspection, humming-kernels==0.1.19) are installed into
# /tmp/site first when present (machines without a package index). Everything lands in OUT_DIR as
# h200-kernels.tar.gz (one directory per backend: status.json, result.json, crossover.png) plus logs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: h200_kernels.sh OUT_DIR [BACKEND ...]}; shift
if [ $# -gt 0 ]; then BACKENDS=("$@"); else BACKENDS=(humming torch-bf16); fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT/work"
source benchmarks/gpu_env.sh
gpu_env_setup || exit 1
gpu_env_log > "$OUT/work/env.log" 2>&1
cat "$OUT/work/env.log"

if [[ " ${BACKENDS[*]} " == *" marlin "* && -z "${SPX_MARLIN_LIB:-}" ]]; then
  # no vLLM here: build vLLM 0.33.0's MXFP8 Marlin ops from its sources (spx.bench.gemm.marlin_build)
  SRC=${SPX_VLLM_SRC:-.vllm-src/vllm-0.33.0}
  echo "== marlin build from $SRC"
  SPX_MARLIN_LIB=$(python3 -m spx.bench.gemm.marlin_build --vllm-src "$SRC" --out /tmp/spx-marlin 2> "$OUT/work/marlin_build.log" | tail -1)
  export SPX_MARLIN_LIB
  echo "SPX_MARLIN_LIB=$SPX_MARLIN_LIB" | tee -a "$OUT/work/env.log"
fi

echo "== humming smoke"
python3 - > "$OUT/work/humming_smoke.log" 2>&1 <<'EOF'
import time, torch
from torch.profiler import ProfilerActivity, profile
from spx.api import ExperimentSpec
from spx.bench.gemm import build_projection, resolve_gemm_backend, weight_block_of
from spx.bench.weights import random_block_fp8_weight
spec = ExperimentSpec()
dev = torch.device("cuda", 0)
print("resolve auto:", resolve_gemm_backend(spec, dev))
w = random_block_fp8_weight(1792, 5120, weight_block_of(spec), dev, torch.Generator(device=dev).manual_seed(0))
t0 = time.monotonic(); proj = build_projection("humming", w, spec, dev); print(f"prepare {time.monotonic()-t0:.1f} s, {proj.activation}")
ref_w = w.dequantize(torch.float32)
for m in (6, 1024, 8192):
    x = torch.randn(m, 5120, device=dev).to(torch.bfloat16)
    t0 = time.monotonic(); y = proj(x); torch.cuda.synchronize(); first = time.monotonic() - t0
    ref = x.float() @ ref_w.t()
    rel = float((y.float() - ref).norm() / ref.norm())
    y2 = proj(x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        yg = proj(x)
    yg.fill_(float("nan")); g.replay(); torch.cuda.synchronize()
    rerun = float((y2.float() - y.float()).abs().max()); graph_diff = float((yg.float() - y.float()).abs().max())
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        g.replay(); torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
    print(f"M={m}: out {tuple(y.shape)} {y.dtype}, first call {first:.1f} s, rel err {rel:.2e}, max|eager2-eager| {rerun:.3g}, max|graph-eager| {graph_diff:.3g} (max|y| {float(y.float().abs().max()):.3g}), kernels {[n[:90] for n in names]}")
EOF
cat "$OUT/work/humming_smoke.log"

echo "== sweeps: ${BACKENDS[*]}"
python3 benchmarks/tool_speed.py --gpu-only --backends "${BACKENDS[@]}" --out "$OUT/work/runs" 2>&1 | tee "$OUT/work/speed.log"
RESULTS=()
for b in "${BACKENDS[@]}"; do
  d="$OUT/work/runs/deepseek-v41-tp8-$b"
  mkdir -p "$OUT/work/results/$b"
  for f in status.json result.json crossover.png; do [ -f "$d/$f" ] && cp "$d/$f" "$OUT/work/results/$b/"; done
  [ -f "$d/result.json" ] && RESULTS+=("$d/result.json")
done

echo "== do_bench cross-check"
python3 benchmarks/crosscheck_do_bench.py --tokens 8192 --backends "$(IFS=,; echo "${BACKENDS[*]}")" "${RESULTS[@]}" 2>&1 | tee "$OUT/work/crosscheck.log"
nvidia-smi --query-gpu=name,clocks.current.sm,clocks.current.memory,temperature.gpu,power.draw --format=csv >> "$OUT/work/env.log" 2>&1

tar -czf "$OUT/h200-kernels.tar.gz" -C "$OUT/work" .
cp "$OUT/work/"*.log "$OUT/"
rm -rf "$OUT/work"
ls -la "$OUT"
