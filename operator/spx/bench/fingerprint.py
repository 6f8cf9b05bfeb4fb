"""Environment fingerprint: what a measurement is valid for (GPU, driver, CUDA, torch, NCCL loaded, vLLM, clocks)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from typing import TYPE_CHECKING

import spx
from spx.api.status import Environment

if TYPE_CHECKING:
    import torch


def _pkg_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvml(device_index: int) -> dict[str, object]:
    """Driver version and current clocks through NVML (nvidia-ml-py), if present; else empty."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            driver = pynvml.nvmlSystemGetDriverVersion()
            return {
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVML missing or not permitted: the fingerprint just has fewer fields
        return {}


def host_cpu_model() -> str | None:
    """The host CPU's model name (``model name`` in ``/proc/cpuinfo``, as ``lscpu`` shows it), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()[:128] or None
    except OSError:
        pass
    return platform.processor()[:128] or None


def collect_environment(device: torch.device, world_size: int, kernels: list[str] | None = None) -> Environment:
    """Fingerprint of this process's device. NCCL is the version torch actually loaded."""
    import torch

    env = Environment(
        gpu_count=world_size if device.type == "cuda" else None,
        torch=torch.__version__,
        python=platform.python_version(),
        spx=spx.__version__,
        vllm=_pkg_version("vllm"),
        node=os.environ.get("SPX_NODE_NAME") or socket.gethostname(),
        device=device.type,
        host_cpu=host_cpu_model(),
        nccl_env={k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        kernels=sorted(set(kernels or [])),
    )
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        major, minor = torch.cuda.get_device_capability(device)
        nccl = torch.cuda.nccl.version() if torch.distributed.is_nccl_available() else None
        env.gpu = props.name
        env.compute_capability = f"{major}.{minor}"
        env.cuda = torch.version.cuda
        env.nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else (str(nccl) if nccl else None)
        env.l2_bytes = int(getattr(props, "L2_cache_size", 0)) or None
        nvml = _nvml(device.index or 0)
        env.driver = nvml.get("driver")  # type: ignore[assignment]
        env.sm_clock_mhz = nvml.get("sm_clock_mhz")  # type: ignore[assignment]
        env.mem_clock_mhz = nvml.get("mem_clock_mhz")  # type: ignore[assignment]
    else:
        env.gpu = f"CPU ({platform.processor() or platform.machine()})"
    return env
