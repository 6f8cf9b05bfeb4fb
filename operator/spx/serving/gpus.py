"""Whether the GPUs are free after an arm's server stopped (``nvidia-smi --query-compute-apps``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence

from spx.api.serving import GpuCheck


def nvidia_smi_argv(nvidia_smi: Sequence[str] | None, env: Mapping[str, str] | None) -> list[str] | None:
    """The ``nvidia-smi`` argv to use: ``nvidia_smi`` if given (empty: none), else the one on ``PATH``."""
    if nvidia_smi is not None:
        return list(nvidia_smi) or None
    found = shutil.which("nvidia-smi", path=(env or os.environ).get("PATH"))
    return [found] if found else None


def gpu_processes(smi: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Compute processes ``nvidia-smi`` lists (``pid, used_memory`` lines).

    Raises:
        RuntimeError: ``nvidia-smi`` failed.
    """
    out = subprocess.run(
        [*smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=60, check=False, env=None if env is None else dict(env),
    )
    if out.returncode != 0:
        raise RuntimeError(f"nvidia-smi exited with {out.returncode}: {out.stderr.strip()[:300]}")
    return [line.strip() for line in out.stdout.splitlines() if line.strip() and "No running" not in line]


def wait_gpus_free(
    smi: Sequence[str] | None, env: Mapping[str, str] | None, timeout: float, poll: float
) -> tuple[GpuCheck, str]:
    """``(freed|busy|skipped, detail)`` after polling ``nvidia-smi`` every ``poll`` s for up to ``timeout`` s."""
    if smi is None:
        return "skipped", "nvidia-smi not found: GPU release not checked"
    t0 = time.monotonic()
    while True:
        try:
            procs = gpu_processes(smi, env)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
            return "skipped", f"nvidia-smi failed: {err}"
        if not procs:
            return "freed", f"no GPU compute process after {time.monotonic() - t0:.1f}s"
        if time.monotonic() - t0 >= timeout:
            return "busy", f"GPU compute processes still listed after {timeout:.0f}s: {procs[:8]}"
        time.sleep(poll)
