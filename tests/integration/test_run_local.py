"""``spx run`` end to end on CPU: the real kernel bench, 2 gloo ranks, small shapes (examples/quickstart.yaml).

Each run starts two spawned rank processes through torch's elastic launcher (~10 s on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from spx.api import SUMMARY_MAX_BYTES, ExperimentStatus, KernelResult, ResultSummary, load_experiment
from spx.vocabulary import CPU_NOTE

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: |split - replicated| allowed on CPU (bf16 outputs of the same GEMM, rows sliced differently).
TOLERANCE = 0.05


def spx(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("spx")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "spx.cli"]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}
    full_env.update(env or {})
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, float]:
    out = tmp_path_factory.mktemp("quickstart")
    t0 = time.monotonic()
    proc = spx("run", str(QUICKSTART), "--out", str(out), "--summary-file", str(out / "summary.json"))
    return proc, out, time.monotonic() - t0


def test_quickstart_completes(quickstart_run: tuple[subprocess.CompletedProcess[str], Path, float]) -> None:
    # its speed target (< 60 s on 2 cores) is checked by benchmarks/tool_speed.py, not here
    proc, _, _ = quickstart_run
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rank_failing_mid_sweep_keeps_earlier_points(tmp_path: Path) -> None:
    env = {"SPX_FAULT_INJECT_RANK": "0", "SPX_FAULT_INJECT_TOKENS": "128"}
    proc = spx("run", str(QUICKSTART), "--out", str(tmp_path), env=env, timeout=120)
    assert proc.returncode == 1
    assert "injected fault on rank 0 at 128 tokens" in proc.stderr
    result = KernelResult.model_validate_json((tmp_path / "result.json").read_text())
    assert result.complete is False and "injected fault on rank 0" in (result.error or "")
    assert [p.tokens for p in result.points] == [8, 32]
    status = ExperimentStatus.model_validate_json((tmp_path / "status.json").read_text())
    assert status.phase == "Failed" and status.verdict is None
    assert {c.type: c.reason for c in status.conditions}["Decided"] == "BenchmarkFailed"


def test_quickstart_status(quickstart_run: tuple[subprocess.CompletedProcess[str], Path, float]) -> None:
    _, out, _ = quickstart_run
    status = ExperimentStatus.model_validate(json.loads((out / "status.json").read_text()))
    assert status.phase == "Succeeded"
    assert status.verdict in ("Pass", "Fail", "Inconclusive")
    assert status.verdict_reasons
    conds = {c.type: c for c in status.conditions}
    assert conds["Completed"].status == "True"
    assert conds["Decided"].status == "True" and conds["Decided"].reason == status.verdict
    assert status.environment is not None and status.environment.device == "cpu"
    assert CPU_NOTE in (status.message or "")
    tokens = load_experiment(QUICKSTART.read_text()).spec.sweep.tokens
    assert status.kernel is not None and [p.tokens for p in status.kernel.points] == tokens
    assert status.kernel.gather_source == "measured"


def test_quickstart_result(quickstart_run: tuple[subprocess.CompletedProcess[str], Path, float]) -> None:
    _, out, _ = quickstart_run
    result = KernelResult.model_validate(json.loads((out / "result.json").read_text()))
    spec = load_experiment(QUICKSTART.read_text()).spec
    assert result.complete and result.error is None
    assert result.world_size == 2 and result.device == "cpu" and result.gather_source == "measured"
    assert [p.tokens for p in result.points] == spec.sweep.tokens
    for p in result.points:
        assert p.max_abs_error <= TOLERANCE, f"split != replicated at {p.tokens} tokens"
        assert len(p.replicated.samples_us) == spec.kernel.samples == len(p.split.samples_us)
        assert p.rows_per_rank == p.padded_tokens // 2
    # the streamed partial file is removed once result.json holds every point (kept on failure)
    assert not (out / "points.partial.jsonl").exists()


def test_quickstart_plot_summary_and_output(
    quickstart_run: tuple[subprocess.CompletedProcess[str], Path, float],
) -> None:
    proc, out, _ = quickstart_run
    assert (out / "crossover.png").read_bytes()[:8] == PNG_MAGIC
    text = (out / "summary.json").read_text()
    assert len(text.encode()) <= SUMMARY_MAX_BYTES
    summary = ResultSummary.model_validate_json(text)
    assert summary.complete and len(summary.points) == 5
    assert CPU_NOTE in proc.stdout  # table caption / closing note
    # the table (rich wraps its headers to an 80-column pipe: "replicated" and "µs" may sit on two lines)
    assert "replicated" in proc.stdout and "split" in proc.stdout and "verdict:" in proc.stdout
    assert "recommended threshold" in proc.stdout
    for rank in (0, 1):
        assert (out / "logs" / f"rank{rank}.stderr.log").exists()


def test_jsonl_mode_streams_points_then_result(tmp_path: Path) -> None:
    proc = spx("run", str(QUICKSTART), "--out", str(tmp_path), "--jsonl", "--tokens", "8,64", "--samples", "5")
    assert proc.returncode == 0, proc.stderr
    docs = [json.loads(line) for line in proc.stdout.splitlines()]  # stdout: JSON lines only
    assert [d["kind"] for d in docs] == ["point", "point", "result"]
    assert [d["point"]["tokens"] for d in docs[:2]] == [8, 64]
    result = KernelResult.model_validate(docs[-1]["result"])
    assert result.complete and result.spec.kernel.samples == 5
    assert CPU_NOTE in proc.stderr and "verdict:" in proc.stderr  # human output on stderr


def test_failing_rank_ends_the_run_with_its_message(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = spx("run", str(QUICKSTART), "--out", str(tmp_path), env={"SPX_FAULT_INJECT_RANK": "1"}, timeout=120)
    wall = time.monotonic() - t0
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert wall < 60, f"a failing rank took {wall:.0f} s to end the run"
    assert "injected fault on rank 1" in proc.stderr
    assert "rank 1 failed" in proc.stderr
    assert "Traceback" not in proc.stderr  # the rank's message, not the launcher's traceback dump
    result = KernelResult.model_validate(json.loads((tmp_path / "result.json").read_text()))
    assert result.complete is False
    assert result.error and "injected fault on rank 1" in result.error
    status = ExperimentStatus.model_validate(json.loads((tmp_path / "status.json").read_text()))
    assert status.phase == "Failed" and status.verdict is None
    assert {c.type: c.reason for c in status.conditions}["Decided"] == "BenchmarkFailed"
    stderr_log = (tmp_path / "logs" / "rank1.stderr.log").read_text()
    assert "injected fault on rank 1" in stderr_log or (tmp_path / "logs" / "rank1.error.json").exists()


def test_failure_mid_sweep_keeps_the_points_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real bench on 2 ranks; rank 0 fails after its 2nd point (a wrapper around ``on_point``)."""
    from spx.runner.local import run_local

    mod = tmp_path / "pkg" / "spx_test_faulty_bench.py"
    mod.parent.mkdir()
    mod.write_text(textwrap.dedent("""
        from spx.bench.kernel import run_kernel_bench

        def run(spec, *, experiment="local", on_point=None):
            seen = []

            def wrapped(point):
                on_point(point)
                seen.append(point)
                if len(seen) == 2:
                    raise RuntimeError("wrapper fault after 2 points")

            return run_kernel_bench(spec, experiment=experiment, on_point=wrapped)
    """))
    monkeypatch.syspath_prepend(str(mod.parent))  # spawned ranks inherit sys.path
    monkeypatch.delenv("SPX_FAULT_INJECT_RANK", raising=False)
    spec = load_experiment(QUICKSTART.read_text()).spec
    seen: list[int] = []
    outcome = run_local(spec, tmp_path / "out", nproc=2, experiment="t",
                        on_point=lambda p: seen.append(p.tokens), bench="spx_test_faulty_bench:run")
    assert not outcome.ok and outcome.failed_rank == 0
    assert outcome.error and "wrapper fault after 2 points" in outcome.error
    assert [p.tokens for p in outcome.result.points] == spec.sweep.tokens[:2] == seen
    on_disk = KernelResult.model_validate(json.loads((tmp_path / "out" / "result.json").read_text()))
    assert on_disk.complete is False and len(on_disk.points) == 2
