"""What a newcomer saw from the real ``spx`` entry point on folders, and what it must say (each failed before its fix).

- ``spx report DIR`` with a ``step-result.json`` of another experiment warned that it was not judged, yet printed
  "judged with step A/B (step-result.json)" and ``-o json`` listed it in ``judgedWith``: only what was used is listed.
- ``spx run --out D`` where D held the user's own ``status.json`` and ``crossover.png`` said "already holds a run …;
  pass --overwrite", and ``--overwrite`` then refused them as not spx's: the first message says they are not spx's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spx.api.exit_codes import EXIT_OK, EXIT_USAGE
from spx.api.step import StepResult, StepSpec

SPX = str(Path(sys.executable).with_name("spx"))
QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"


def spx(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}
    return subprocess.run([SPX, *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("qs") / "run"
    done = spx("run", str(QUICKSTART), "--tokens", "8", "--out", str(run))
    assert done.returncode == EXIT_OK, done.stderr
    return run


def test_a_step_result_of_another_experiment_is_not_listed_as_judged_with(quickstart_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(quickstart_run, run)
    other = StepResult(experiment="someone-elses", step=StepSpec(), tensor_parallel_size=2, max_num_batched_tokens=8192,
                       gate_threshold_tokens=2048)
    (run / "step-result.json").write_text(other.model_dump_json(by_alias=True), encoding="utf-8")
    text = spx("report", str(run), "--no-plot")
    assert text.returncode == EXIT_OK, text.stderr
    assert "step-result.json: not judged with this run" in text.stderr, text.stderr
    assert "step A/B (step-result.json)" not in text.stdout, text.stdout
    doc = spx("report", str(run), "--no-plot", "-o", "json")
    assert doc.returncode == EXIT_OK, doc.stderr
    assert not any("step-result.json" in s for s in json.loads(doc.stdout)["judgedWith"]), doc.stdout


def test_the_users_own_files_in_out_are_named_as_not_spxs_before_any_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "status.json").write_text('{"phase": "mine"}', encoding="utf-8")
    (out / "crossover.png").write_bytes(b"not spx's")
    first = spx("run", str(QUICKSTART), "--tokens", "8", "--out", str(out))
    assert first.returncode == EXIT_USAGE, first.stderr
    assert "they are not spx's" in first.stderr and "pass --overwrite" not in first.stderr, first.stderr
    assert "crossover.png" in first.stderr and "status.json" in first.stderr, first.stderr
    again = spx("run", str(QUICKSTART), "--tokens", "8", "--out", str(out), "--overwrite")
    assert again.returncode == EXIT_USAGE and "they are not spx's" in again.stderr, again.stderr
    assert (out / "crossover.png").read_bytes() == b"not spx's"


def test_an_earlier_spx_run_in_out_still_asks_for_overwrite(quickstart_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(quickstart_run, out)
    done = spx("run", str(QUICKSTART), "--tokens", "8", "--out", str(out))
    assert done.returncode == EXIT_USAGE and "already holds a run" in done.stderr, done.stderr
    assert "pass --overwrite" in done.stderr and "not spx's" not in done.stderr, done.stderr


def test_spx_validate_refuses_step_lengths_above_the_extra_args_batch_limit(tmp_path: Path) -> None:
    """The newcomer's spec: ``extraArgs: [--max-num-batched-tokens, 4096]``, ``lengths: [2048, 8192]``: ``spx validate``
    passed it and ``spx run --serving`` failed after the whole kernel sweep; now exit 3 up front, every problem listed."""
    text = QUICKSTART.read_text(encoding="utf-8").replace("timeoutSeconds: 300", "timeoutSeconds: 86400")
    text += ('  serving:\n    model: tiny\n    points: []\n    extraArgs: ["--max-num-batched-tokens", "4096"]\n'
             "    step: {lengths: [2048, 8192], rounds: 20, minRounds: 40}\n")
    path = tmp_path / "exp.yaml"
    path.write_text(text, encoding="utf-8")
    done = spx("validate", str(path))
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "spec.serving.step.lengths: [8192] exceed max_num_batched_tokens 4096" in done.stderr, done.stderr
    assert "spec.serving.step.minRounds: 40 is above rounds 20" in done.stderr, done.stderr
    assert "spec.spec" not in done.stderr and "Traceback" not in done.stderr, done.stderr
