"""``spx run --serving`` and ``spx serving`` check what the vLLM benches need before anything is measured, and
``spx serving`` always leaves a status.json that ``spx report`` and ``spx gate`` read (issue 37 req 3).

Real ``spx`` subprocesses; the vLLM command is the ``vllm`` stand-in of ``tests/integration/standins`` where one
must run (a real ``vllm serve`` needs GPUs), a path that does not exist where none must.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spx.api.exit_codes import EXIT_FAIL, EXIT_UNDECIDED, EXIT_USAGE
from spx_testing.specs import TINY_CPU_YAML

STANDIN_VLLM = Path(__file__).resolve().parents[1] / "integration" / "standins" / "vllm"


def _spx(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spx", *args], capture_output=True, text=True, timeout=300,
                          env=env or dict(os.environ))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serving_experiment(tmp: Path, port: int, **extra: object) -> Path:
    """The tiny CPU kernel spec with a spec.serving section (one short point) on ``port``."""
    import yaml

    doc = yaml.safe_load(TINY_CPU_YAML)
    doc["spec"]["serving"] = {"model": "m", "port": port, "startupTimeoutSeconds": 30, "shutdownTimeoutSeconds": 5,
                              "gpuReleaseTimeoutSeconds": 5, "points": [
                                  {"name": "p", "inputLen": 64, "outputLen": 1, "concurrency": 1, "numPrompts": 2,
                                   "metric": "ttft"}], **extra.pop("serving", {})}  # type: ignore[dict-item]
    doc["spec"].update(extra)
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("command", ["run", "serving"])
def test_a_missing_vllm_is_refused_before_anything_is_measured(tmp_path: Path, command: str) -> None:
    """``--vllm`` naming no program: exit 3 at once, the flag and the install named, no kernel point measured
    (``spx run --serving`` used to run the whole kernel sweep, then fail with ``[Errno 2] … 'vllm'``)."""
    exp, out = _serving_experiment(tmp_path, _free_port()), tmp_path / "out"
    extra = ["--serving"] if command == "run" else []
    proc = _spx(command, str(exp), "--out", str(out), *extra, "--vllm", str(tmp_path / "no-such-vllm"))
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "--vllm" in proc.stderr and "pip install vllm==0.33.0" in proc.stderr, proc.stderr
    assert not (out / "result.json").exists() and not (out / "points.partial.jsonl").exists()


def test_vllm_not_on_path_names_the_install(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # (no vllm there; python is called by its full path)
    proc = _spx("run", str(_serving_experiment(tmp_path, _free_port())), "--out", str(tmp_path / "out"), "--serving",
                env=env)
    assert proc.returncode == EXIT_USAGE and "'vllm' is not on PATH" in proc.stderr, proc.stderr


def test_a_taken_port_and_a_missing_model_path_are_named(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        exp = _serving_experiment(tmp_path, port, serving={"modelPath": str(tmp_path / "weights")})
        proc = _spx("serving", str(exp), "--out", str(tmp_path / "out"), "--vllm", f"{sys.executable} {STANDIN_VLLM}")
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert f"spec.serving.port {port}: something already listens" in proc.stderr, proc.stderr
    assert "spec.serving.modelPath" in proc.stderr and "is not a directory here" in proc.stderr


def test_spx_serving_that_cannot_start_leaves_a_status_report_and_gate_read(tmp_path: Path) -> None:
    """The GSM8K dataset is missing (found only once the benches start): exit 1 and a status.json saying why;
    ``spx gate`` reads it (exit 2: no verdict) and so does ``spx report`` (it used to find no status.json)."""
    exp = _serving_experiment(tmp_path, _free_port(), accuracy={"datasetPath": str(tmp_path / "none.jsonl")})
    out = tmp_path / "out"
    proc = _spx("serving", str(exp), "--out", str(out), "--vllm", f"{sys.executable} {STANDIN_VLLM}")
    assert proc.returncode == EXIT_FAIL, proc.stderr
    status = json.loads((out / "status.json").read_text())
    assert status["phase"] == "Failed" and "the vLLM benches did not start" in status["message"], status
    gate = _spx("gate", str(out))
    assert gate.returncode == EXIT_UNDECIDED and "did not start" in gate.stdout, gate.stdout + gate.stderr
    report = _spx("report", str(out), "--no-plot")
    assert report.returncode != EXIT_USAGE or "no result.json or status.json" not in report.stderr, report.stderr
    assert "did not start" in report.stdout + report.stderr, report.stdout + report.stderr


def test_spx_run_of_a_serving_spec_without_serving_says_so(tmp_path: Path) -> None:
    """``spx run`` of a spec with a serving section, without ``--serving``, says how to run its vLLM benches (it
    used to say nothing). An ``--out`` that is a file ends the run right after the note (no rank starts)."""
    (tmp_path / "a-file").write_text("")
    proc = _spx("run", str(_serving_experiment(tmp_path, _free_port())), "--out", str(tmp_path / "a-file"))
    assert proc.returncode == EXIT_USAGE
    assert "has a spec.serving section: add --serving" in " ".join(proc.stderr.split()), proc.stderr
