# Sourced by the GPU measurement scripts (h200_kernels.sh, h200_eager.sh, eager_step.sh), from the repository root.
#   gpu_env_setup: wheels in ${SPX_WHEELS:-.whl}/ (machines without a package index) go to /tmp/site;
#                  PYTHONPATH gets them and operator/ (spx from this checkout).
#   gpu_env_log:   the environment the timings belong to: date, GPU, driver, clocks, torch/CUDA/triton,
#                  the packages that matter and the host CPU (eager host times are a property of it).
gpu_env_setup() {
  local wheels=${SPX_WHEELS:-.whl}
  if ls "$wheels"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl || return 1
    export PYTHONPATH=/tmp/site:$PWD/operator
  else
    export PYTHONPATH=$PWD/operator
  fi
}

gpu_env_log() {
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,clocks.current.sm,clocks.current.memory,temperature.gpu,power.draw --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
  python3 -m pip list 2>/dev/null | grep -i -E "^(humming|pydantic|torch |triton)"
  PYTHONPATH=${PYTHONPATH:-} python3 -c 'import importlib.metadata as m; print("humming-kernels", m.version("humming-kernels"))' 2>/dev/null
  lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|CPU max MHz|CPU MHz|Hypervisor)"
}
