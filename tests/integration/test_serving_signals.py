"""No vLLM server outlives spx (issue 37 req 1): real ``spx serving`` processes, real signals, a real server
process (the ``vllm serve`` stand-in of ``standins/``: it listens on a port and starts a child in its process
group that ignores SIGTERM, as vLLM's engine core and workers run beside its API server).

Why a stand-in: a real ``vllm serve`` of the experiment's model needs GPUs (module docstring of
``standins/vllm``). No fixed sleeps: each step polls for an event (a pid file, a port, a process gone) bounded by a
generous deadline, so a loaded machine only makes the test slower.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spx.api.exit_codes import EXIT_INTERRUPTED

STANDINS = Path(__file__).resolve().parent / "standins"
SPX = str(Path(sys.executable).with_name("spx"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _poll(what: str, ready: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGINT-ignored"])
def test_no_server_outlives_spx_serving(tmp_path: Path, how: str) -> None:
    """``spx serving`` is stopped while its server measures: by SIGKILL (no code of spx runs: the server's guard
    stops its group), by SIGTERM (handled as Ctrl-C: exit 130, the arm's failure recorded in serving-result.json),
    and by SIGINT when spx was started with SIGINT ignored (a ``&`` job of a script). Each time the server, its
    child and its port are gone within seconds (they used to run on, holding the port and, on a GPU node, the GPUs)."""
    port, pids = _free_port(), tmp_path / "pids"
    pids.mkdir()
    exp = tmp_path / "exp.yaml"
    exp.write_text(json.dumps({
        "apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment", "metadata": {"name": "sig"},
        "spec": {"serving": {"model": "m", "port": port, "startupTimeoutSeconds": 60, "shutdownTimeoutSeconds": 5,
                             "gpuReleaseTimeoutSeconds": 5, "points": [
                                 {"name": "long", "inputLen": 64, "outputLen": 1, "concurrency": 1,
                                  "numPrompts": 100_000, "metric": "ttft"}]}},
    }))
    out, child_file = tmp_path / "out", tmp_path / "child.pid"
    env = {**os.environ, "STANDIN_PID_DIR": str(pids), "STANDIN_CHILD_PID_FILE": str(child_file),
           "SPX_SHARD_FUSED_WQA_WKV_TARGET": "standin_deepseek_attention", "PYTHONPATH": os.pathsep.join(sys.path)}
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if how == "SIGINT-ignored" else None
    proc = subprocess.Popen([SPX, "serving", str(exp), "--out", str(out), "--vllm",
                             f"{sys.executable} {STANDINS / 'vllm'}"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=ignore)
    server: list[int] = []
    try:
        _poll("the server up, with its child", lambda: any(pids.iterdir()) and child_file.is_file()
              and _listening(port) or proc.poll() is not None)
        assert proc.poll() is None, proc.communicate()
        server = [int(p.name) for p in pids.iterdir()] + [int(child_file.read_text())]
        assert all(_alive(p) for p in server)
        os.kill(proc.pid, {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}.get(how, signal.SIGINT))
        _, err = proc.communicate(timeout=120)
        _poll("the server and its child gone", lambda: not any(_alive(p) for p in server), 60)
        _poll("the port free", lambda: not _listening(port), 30)
        if how == "SIGKILL":
            return
        assert proc.returncode == EXIT_INTERRUPTED, err[-2000:]
        assert "every vLLM server spx started was stopped" in err, err[-2000:]
        result = json.loads((out / "serving-result.json").read_text())
        assert any("arm stopped: interrupted" in f for f in result["failures"]), result["failures"]
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in server:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
