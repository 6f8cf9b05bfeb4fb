"""`spx gate NAME|status.json`: exit 0 Pass, 1 Fail, 2 Inconclusive / undecided, 3 usage (unreadable), 4 unreachable.

Decisions are table-tested on real ExperimentStatus documents; the command line is run as the
installed console script on local `spx run` outputs (status.json, its directory, a `kubectl get -o
json` dump). The cluster path runs against the emulated API server in tests/gating/test_gate_cluster.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spx.api import Condition, ExperimentStatus, dump_model
from spx.api.exit_codes import EXIT_UNREACHABLE, EXIT_USAGE
from spx.cli.gate import EXIT_FAIL, EXIT_PASS, EXIT_UNDECIDED, decide

NOW = "2026-01-01T00:00:00Z"


def status(
    phase: str = "Succeeded",
    verdict: str | None = None,
    decided: str | None = "True",
    reason: str | None = None,
    generation: int = 1,
    reasons: list[str] | None = None,
) -> dict[str, Any]:
    conditions = []
    if decided is not None:
        conditions.append(
            Condition(
                type="Decided",
                status=decided,
                reason=reason or verdict or "Running",
                message="from the test",
                last_transition_time=NOW,
                observed_generation=generation,
            )
        )
    model = ExperimentStatus(
        phase=phase,
        observed_generation=generation,
        conditions=conditions,
        verdict=verdict,
        verdict_reasons=reasons or [],
    )
    return dump_model(model)


CASES = [
    ("pass", status(verdict="Pass", reasons=["split wins by ≥ 1.00× at every count ≥ 2048"]), None, EXIT_PASS, True),
    ("fail", status(verdict="Fail", reasons=["split loses at 2048 tokens (0.93×)"]), None, EXIT_FAIL, True),
    ("inconclusive", status(verdict="Inconclusive", reasons=["gather modelled"]), None, EXIT_UNDECIDED, True),
    ("running", status(phase="Running", decided="False", reason="Running"), None, EXIT_UNDECIDED, False),
    ("pending, no conditions", status(phase="Pending", decided=None), None, EXIT_UNDECIDED, False),
    ("benchmark failed", status(phase="Failed", reason="BenchmarkFailed"), None, EXIT_UNDECIDED, True),
    ("invalid spec", status(phase="Failed", reason="InvalidSpec"), None, EXIT_UNDECIDED, True),
    ("stale generation", status(verdict="Pass", generation=1), 2, EXIT_UNDECIDED, False),
    ("current generation", status(verdict="Fail", generation=3), 3, EXIT_FAIL, True),
    # a bare verdict field is not a decision: the phase and the Decided reason are
    ("verdict without conditions", status(verdict="Pass", decided=None), None, EXIT_UNDECIDED, False),
    ("verdict Pass, Decided BenchmarkFailed", status(phase="Failed", verdict="Pass", reason="BenchmarkFailed"), None,
     EXIT_UNDECIDED, True),
    ("verdict Pass, Decided Fail", status(verdict="Pass", reason="Fail"), None, EXIT_FAIL, True),
    # fail closed: a Pass needs the Decided reason and the verdict field both (a hand-edited reason is not one)
    ("verdict Inconclusive, Decided Pass", status(verdict="Inconclusive", reason="Pass"), None, EXIT_UNDECIDED, False),
    ("verdict Fail, Decided Pass", status(verdict="Fail", reason="Pass"), None, EXIT_FAIL, True),
    # a verdict of a wrong case or type is unreadable (exit 3), as spx report refuses it (issue #35)
    ("verdict garbage, Decided Pass", status(verdict="Pass", reason="Pass") | {"verdict": "Passed"}, None,
     3, False),
    ("verdict lower case, Decided Pass", status(verdict="Pass", reason="Pass") | {"verdict": "pass"}, None, 3, False),
    # a CPU smoke run's Pass is trusted only where the run's gate allowed CPU timings (judgement.cpuTimingsAllowed)
    ("CPU Pass, not allowed", status(verdict="Pass") | {"judgement": {"cpu": True}}, None, EXIT_UNDECIDED, False),
    ("CPU Pass by device", status(verdict="Pass") | {"environment": {"device": "cpu"}}, None, EXIT_UNDECIDED, False),
    ("CPU Pass by message", status(verdict="Pass") | {"message": "CPU smoke run: timings say nothing about GPUs. Pass"},
     None, EXIT_UNDECIDED, False),
    ("CPU Pass, allowed", status(verdict="Pass") | {"judgement": {"cpu": True, "cpuTimingsAllowed": True}}, None,
     EXIT_PASS, True),
    ("CPU Fail, not allowed", status(verdict="Fail") | {"judgement": {"cpu": True}}, None, EXIT_FAIL, True),
    ("Decided Pass while Running", status(phase="Running", verdict="Pass"), None, EXIT_UNDECIDED, False),
    ("reason only", {**status(reason="Fail"), "verdict": None}, None, EXIT_FAIL, True),
    ("empty", {}, None, EXIT_UNDECIDED, False),
]


@pytest.mark.parametrize(("doc", "generation", "code", "decided"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide(doc: dict[str, Any], generation: int | None, code: int, decided: bool) -> None:
    result = decide(doc, "ml/h200", generation)
    assert result.exit_code == code
    assert result.decided is decided
    assert result.line().startswith(("Pass", "Fail", "Inconclusive", "Undecided", "No verdict", "error: "))


def test_reasons_are_reported() -> None:
    result = decide(status(verdict="Fail", reasons=["split loses at 2048 tokens (0.93×)"]), "x")
    assert "0.93×" in result.line()
    stale = decide(status(verdict="Pass", generation=1), "x", 2)
    assert "generation 1" in stale.message and "generation 2" in stale.message


def test_a_pass_reason_against_another_verdict_says_why_it_is_not_a_pass() -> None:
    result = decide(status(verdict="Inconclusive", reason="Pass"), "x")
    assert result.exit_code == EXIT_UNDECIDED
    assert "the Decided reason is 'Pass' but the verdict field says 'Inconclusive'" in result.message
    assert not result.line().startswith("Pass")


def spx_gate(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed `spx` console script (the same entry point a pipeline calls)."""
    spx = Path(sys.executable).parent / "spx"
    return subprocess.run([str(spx), "gate", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("verdict", "code"), [("Pass", 0), ("Fail", 1), ("Inconclusive", 2)])
def test_cli_on_a_local_status_json(tmp_path: Path, verdict: str, code: int) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "status.json").write_text(json.dumps(status(verdict=verdict)))
    by_dir = spx_gate(str(out))
    assert by_dir.returncode == code, by_dir.stdout + by_dir.stderr
    assert by_dir.stdout.startswith(verdict)
    by_file = spx_gate(str(out / "status.json"), "--json")
    assert by_file.returncode == code
    assert json.loads(by_file.stdout)["verdict"] == verdict


def test_cli_on_a_kubectl_dump(tmp_path: Path) -> None:
    obj = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
           "metadata": {"name": "x", "generation": 1}, "status": status(verdict="Fail")}  # fmt: skip
    path = tmp_path / "x.json"
    path.write_text(json.dumps(obj))
    assert spx_gate(str(path)).returncode == 1


def test_cli_on_a_kubectl_dump_with_a_newer_generation_is_undecided(tmp_path: Path) -> None:
    """The spec was edited (generation 2) after a Pass for generation 1: that Pass decides nothing."""
    obj = {"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
           "metadata": {"name": "x", "generation": 2}, "status": status(verdict="Pass", generation=1)}  # fmt: skip
    path = tmp_path / "x.json"
    path.write_text(json.dumps(obj))
    run = spx_gate(str(path))
    assert run.returncode == EXIT_UNDECIDED, run.stdout + run.stderr
    assert "generation" in run.stdout + run.stderr
    obj["metadata"]["generation"] = 1
    path.write_text(json.dumps(obj))
    assert spx_gate(str(path)).returncode == EXIT_PASS


def test_cli_unreadable_is_a_usage_error_with_a_message(tmp_path: Path) -> None:
    missing = spx_gate(str(tmp_path / "nope" / "status.json"))
    assert missing.returncode == EXIT_USAGE
    assert "no such file" in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert spx_gate(str(bad)).returncode == EXIT_USAGE
    assert spx_gate("--wait", "x", str(bad)).returncode == EXIT_USAGE  # argparse's own usage error


def test_cli_unreachable_cluster_is_exit_4(tmp_path: Path) -> None:
    """A kubeconfig whose API server refuses connections (a port nothing listens on): exit 4, one line."""
    import socket

    with socket.socket() as s:  # a free port, closed again: connections to it are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
        "users": [{"name": "u", "user": {}}],
    }))
    proc = spx_gate("h200-tp8", "--kubeconfig", str(kubeconfig))
    assert proc.returncode == EXIT_UNREACHABLE, proc.stdout + proc.stderr
    assert "cannot reach the cluster" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    missing = spx_gate("h200-tp8", "--kubeconfig", str(tmp_path / "nope"))
    assert missing.returncode == EXIT_UNREACHABLE and "kubeconfig" in missing.stderr


def test_cli_json_document_has_the_exit_code(tmp_path: Path) -> None:
    (tmp_path / "status.json").write_text(json.dumps(status(verdict="Fail")))
    proc = spx_gate(str(tmp_path), "-o", "json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == doc["exitCode"] == EXIT_FAIL and doc["verdict"] == "Fail"


def test_cli_wait_gives_up_at_the_deadline(tmp_path: Path) -> None:
    (tmp_path / "status.json").write_text(json.dumps(status(phase="Running", decided="False")))
    proc = spx_gate(str(tmp_path), "--wait", "0.5", "--interval", "0.1")
    assert proc.returncode == 2
    assert proc.stdout.startswith("Undecided")


def test_cli_on_a_real_spx_run_output(tmp_path: Path) -> None:
    """The whole local path: `spx run` on CPU (2 gloo ranks, tiny shapes) then `spx gate` on its output."""
    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[2]
    spx = Path(sys.executable).parent / "spx"
    out = tmp_path / "run"
    run = subprocess.run(
        [str(spx), "run", str(root / "examples" / "quickstart.yaml"), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert (out / "status.json").exists(), run.stdout[-2000:] + run.stderr[-2000:]
    written = json.loads((out / "status.json").read_text())
    expected = {"Pass": 0, "Fail": 1}.get(written.get("verdict"), 2)
    gate = spx_gate(str(out))
    assert gate.returncode == expected, gate.stdout + gate.stderr
