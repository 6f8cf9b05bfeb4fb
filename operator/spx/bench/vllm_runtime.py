"""vLLM's process-level set-up for the ``vllm`` backends: import and version check, device/platform, and
vLLM's distributed init (its TP group) once per process. vLLM is imported lazily, inside functions.

Written against vLLM 0.33.0; ``tests/real_vllm`` runs it against the real package on CPU (gloo).
"""

from __future__ import annotations

import importlib
import os
import re
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    import torch

MIN_VLLM = (0, 33)
#: Set to 1 to accept a vLLM whose version string says < 0.33 (a patched or source build).
ENV_SKIP_VERSION_CHECK = "SPX_VLLM_SKIP_VERSION_CHECK"
_HINT = (
    "vLLM is not a dependency of spx: run in the bench image (vLLM base + spx[bench]), "
    "`pip install 'vllm>=0.33'` on a CUDA machine, or `bash scripts/setup_vllm.sh` for the CPU tests."
)


def _parse_version(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a vLLM version, ``None`` when it says nothing (e.g. ``0.1.dev1+g…`` of an
    untagged source build)."""
    m = re.match(r"^(\d+)\.(\d+)", version)
    if m is None:
        return None
    parsed = (int(m.group(1)), int(m.group(2)))
    if parsed == (0, 1) and "dev" in version:
        return None
    return parsed


def ensure_vllm() -> ModuleType:
    """Import vLLM and check its version.

    Raises:
        RuntimeError: ``gemmBackend vllm needs an importable vLLM ≥ 0.33 …`` when ``import vllm``
            fails or its version is older (set ``SPX_VLLM_SKIP_VERSION_CHECK=1`` to accept a patched
            older build).
    """
    try:
        vllm = importlib.import_module("vllm")
    except Exception as err:  # ImportError, or a broken install raising anything on import
        raise RuntimeError(
            f"gemmBackend vllm needs an importable vLLM ≥ {MIN_VLLM[0]}.{MIN_VLLM[1]} "
            f"(import vllm failed: {type(err).__name__}: {err}). {_HINT}"
        ) from err
    version = str(getattr(vllm, "__version__", "unknown"))
    parsed = _parse_version(version)
    if parsed is not None and parsed < MIN_VLLM and os.environ.get(ENV_SKIP_VERSION_CHECK) != "1":
        raise RuntimeError(
            f"gemmBackend vllm needs an importable vLLM ≥ {MIN_VLLM[0]}.{MIN_VLLM[1]} (found {version}, "
            f"without DeepSeek-V4.1's token split); set {ENV_SKIP_VERSION_CHECK}=1 for a patched build. {_HINT}"
        )
    return vllm


def resolve_device(device: torch.device | str) -> torch.device:
    """``cuda`` (index filled in) or ``cpu``; on CPU selects vLLM's CPU platform.

    Raises:
        RuntimeError: another device type; cuda without a visible GPU; CPU asked for after vLLM already
            chose another platform.
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                "gemmBackend/gather vllm on device cuda, but torch sees no CUDA GPU here "
                "(torch.cuda.is_available() is False); use device cpu for a pipeline check"
            )
        return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())
    if dev.type != "cpu":
        raise RuntimeError(f"gemmBackend/gather vllm runs on cuda (or cpu for tests), not {dev}")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # read when vLLM first resolves its platform
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        raise RuntimeError(
            f"gemmBackend vllm on device cpu needs vLLM's CPU platform, but vLLM chose "
            f"{type(current_platform).__name__}: set VLLM_TARGET_DEVICE=cpu before vLLM is first used"
        )
    return dev


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_RUNTIME: dict[str, Any] = {}


def init_vllm_runtime(device: torch.device | str) -> Any:
    """vLLM's distributed init over this run's ranks, once per process; returns the ``VllmConfig``.

    Uses the existing ``torch.distributed`` world when the bench already initialised it (vLLM reuses
    it), else ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (``env://``), else a single local rank. The TP
    group is the whole world, as in a TP-only deployment: NCCL with custom all-reduce enabled on
    CUDA, gloo on CPU. The config has no model config (``initialize_model_parallel`` reads
    ``model_config.is_moe`` when there is one).

    Raises:
        RuntimeError: no importable vLLM ≥ 0.33; an unsupported device (see :func:`resolve_device`).
    """
    if "config" in _RUNTIME:
        return _RUNTIME["config"]
    ensure_vllm()
    import torch
    import torch.distributed as dist
    from vllm.config import ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    dev = resolve_device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if dist.is_initialized():
        rank, world_size = dist.get_rank(), dist.get_world_size()
        init_method = "env://"
    else:
        rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        # Under torch's elastic launcher (spx run, torchrun) even one rank must rendezvous through the
        # agent's store at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE): a tcp:// URL of our own
        # makes the rank wait forever as a client of a store nobody serves.
        launched = bool(os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"))
        init_method = "env://" if world_size > 1 or launched else f"tcp://127.0.0.1:{_free_port()}"
    local_rank = int(os.environ.get("LOCAL_RANK", dev.index if dev.index is not None else rank))
    config = VllmConfig(parallel_config=ParallelConfig(tensor_parallel_size=world_size, disable_custom_all_reduce=False))
    with set_current_vllm_config(config):
        if dev.type == "cuda":
            ps.set_custom_all_reduce(True)
        if not ps.model_parallel_is_initialized():
            ps.init_distributed_environment(
                world_size=world_size, rank=rank, distributed_init_method=init_method, local_rank=local_rank,
                backend="nccl" if dev.type == "cuda" else "gloo",
            )
            ps.ensure_model_parallel_initialized(world_size, 1)
    _RUNTIME["config"] = config
    return config
