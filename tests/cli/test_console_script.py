"""The installed ``spx`` console script as users meet it: what it refuses and says, exit codes, locks, interrupts.

Runs that start ranks use tiny shapes (2 gloo ranks, 1-2 token counts, 5 samples): a few seconds each
on 2 cores. No test waits a fixed time: waits are on events (a FIFO's reader, a lock, a process' exit)
bounded by generous deadlines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spx.api.exit_codes import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from spx_testing.specs import EXPERIMENT_HEAD, TINY_CPU_YAML

REPO = Path(__file__).resolve().parents[2]
TP8 = REPO / "examples" / "deepseek-v41-tp8.yaml"
HEAD, TINY = EXPERIMENT_HEAD, TINY_CPU_YAML
#: Bounded messages: a whole error output stays under this many characters.
BOUNDED = 2000


def spx(*args: str, env: dict[str, str] | None = None, timeout: float = 240, cwd: Path = REPO,
        ) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("spx")
    full = {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}
    full.update(env or {})
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=full, cwd=cwd)


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def no_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return True
    return not torch.cuda.is_available()


# 1. GPU-sized spec on CPU; progress when stdout is not a terminal ------------------------------------


@pytest.mark.skipif(not no_gpu(), reason="the refusal is for machines without a GPU")
def test_gpu_sized_spec_refuses_cpu_with_an_estimate(tmp_path: Path) -> None:
    proc = spx("run", str(TP8), "--out", str(tmp_path / "out"))
    assert proc.returncode == EXIT_USAGE, proc.stderr
    err = proc.stderr
    assert "GPU-sized" in err and "--device cpu" in err and "spec.kernel.device: cpu" in err
    # one rule, the one docs/cli.md gives (a count of FLOPs, the same on every machine), and no time estimate
    assert "FLOPs per rank" in err and "over the 1e+12" in err and "docs/cli.md" in err
    assert "when its GEMMs add up to more than 10¹²" in (REPO / "docs" / "cli.md").read_text()
    assert " s of GEMMs" not in err and "min of GEMMs" not in err and "2 minutes" not in err
    assert not (tmp_path / "out" / "logs").exists()  # nothing was spawned
    assert "recommended threshold" not in proc.stdout


def test_progress_line_per_point_on_stderr_when_piped(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = spx("run", str(write(tmp_path, TINY)), "--out", str(tmp_path / "out"))
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("spx: [")]
    assert [ln.split("]")[0] for ln in lines] == ["spx: [1/2", "spx: [2/2"], proc.stderr
    assert "tokens=8:" in lines[0] and "tokens=32:" in lines[1] and "speedup" in lines[0]
    assert "spx: starting 2 cpu rank(s) for 2 token counts; estimate " in proc.stderr and "of GEMMs" in proc.stderr


# 2. Non-finite numbers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", ".NaN"])
@pytest.mark.parametrize("field", ["gate: {maxAbsError: %s}", "kernel: {gatherModel: {latencyUs: %s}}",
                                   "gate: {minSpeedupAtOrAboveThreshold: %s}"])
def test_non_finite_numbers_are_refused_at_validation(tmp_path: Path, field: str, value: str) -> None:
    path = write(tmp_path, HEAD + "metadata: {name: t}\nspec:\n  " + field % value + "\n")
    proc = spx("validate", str(path))
    assert proc.returncode == EXIT_USAGE
    assert "finite number" in proc.stderr or "must be at most" in proc.stderr or "greater than" in proc.stderr


def test_non_finite_max_abs_error_names_the_field(tmp_path: Path) -> None:
    proc = spx("validate", str(write(tmp_path, HEAD + "metadata: {name: t}\nspec:\n  gate: {maxAbsError: .inf}\n")))
    assert proc.returncode == EXIT_USAGE
    assert "spec.gate.maxAbsError: must be a finite number" in proc.stderr


# 3. YAML bombs and huge lists ------------------------------------------------------------------------------


def bomb_text(levels: int = 12) -> str:
    text = HEAD + "metadata: {name: bomb}\nspec:\n  a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    for i in range(1, levels):
        text += f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    return text


def test_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    for cmd in (["validate"], ["run", "--out", str(tmp_path / "out")]):
        proc = spx(*cmd[:1], str(write(tmp_path, bomb_text())), *cmd[1:], timeout=60)
        assert proc.returncode == EXIT_USAGE
        assert "alias bomb" in proc.stderr and len(proc.stderr) < BOUNDED


def test_100000_token_counts_give_a_bounded_message(tmp_path: Path) -> None:
    tokens = ", ".join(str(i) for i in range(1, 100_001))
    path = write(tmp_path, HEAD + f"metadata: {{name: many}}\nspec:\n  sweep:\n    tokens: [{tokens}]\n")
    proc = spx("validate", str(path))
    assert proc.returncode == EXIT_USAGE and "byte limit" in proc.stderr and len(proc.stderr) < BOUNDED
    # under the size limit: validation runs, and its message is bounded too
    tokens = ", ".join(str(i) for i in range(1, 30_001))
    path = write(tmp_path, HEAD + f"metadata: {{name: many}}\nspec:\n  sweep:\n    tokens: [{tokens}]\n")
    proc = spx("validate", str(path))
    assert proc.returncode == EXIT_USAGE and "spec.sweep.tokens: must have at most 64 items" in proc.stderr
    assert "(30000 items)" in proc.stderr and len(proc.stderr) < BOUNDED


def test_many_bad_values_are_counted_not_listed(tmp_path: Path) -> None:
    bad = ", ".join(f"f{i}: 1" for i in range(60))  # 60 unknown fields: 60 problems
    path = write(tmp_path, HEAD + f"metadata: {{name: t}}\nspec:\n  kernel: {{{bad}}}\n")
    proc = spx("validate", str(path))
    assert proc.returncode == EXIT_USAGE and "… and 40 more problems" in proc.stderr and len(proc.stderr) < 4000
    tokens = ", ".join(f'"{i}"' for i in range(60))  # strings where counts belong: one line for the list
    proc = spx("validate", str(write(tmp_path, HEAD + f"metadata: {{name: t}}\nspec:\n  sweep:\n    tokens: [{tokens}]\n")))
    assert proc.returncode == EXIT_USAGE and "spec.sweep.tokens[0…59] (60 items): must be a whole number" in proc.stderr
    assert "more problems" not in proc.stderr


# 4. The output folder is locked for the run's lifetime ------------------------------------------------------


def test_a_second_run_into_a_locked_out_exits_with_a_clear_error(tmp_path: Path) -> None:
    from spx.rundir import RunDirectory

    out = tmp_path / "out"
    with RunDirectory(out).locked():  # a real fcntl lock held by this process, as a running `spx run` holds it
        proc = spx("run", str(write(tmp_path, TINY)), "--out", str(out), "--overwrite")
    assert proc.returncode == EXIT_USAGE
    assert "in use by another spx run" in proc.stderr and f"pid {os.getpid()}" in proc.stderr
    assert not (out / "result.json").exists() and not (out / ".spx.lock").exists()


def test_two_concurrent_runs_one_wins_one_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    exp = write(tmp_path, TINY)
    exe = Path(sys.executable).with_name("spx")
    out = tmp_path / "out"
    first = subprocess.Popen([str(exe), "run", str(exp), "--out", str(out)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / ".spx.lock").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for an event (the lock file), bounded by the deadline
    second = spx("run", str(exp), "--out", str(out), "--overwrite")
    out1, err1 = first.communicate(timeout=240)
    assert first.returncode == EXIT_OK, err1
    if (out / "result.json").exists() and second.returncode == EXIT_OK:  # the first ended before the second started
        pytest.skip("the first run finished before the second started: no overlap to test")
    assert second.returncode == EXIT_USAGE and "in use by another spx run" in second.stderr


# 5. Memory estimate before spawning; the log that holds a dead rank's traceback --------------------------------


def test_a_sweep_too_large_for_memory_is_refused_with_the_number(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    text = TINY.replace("hiddenSize: 256, outputSizes: [128]", "hiddenSize: 5120, outputSizes: [1280, 512]")
    text = text.replace("tokens: [8, 32]", "tokens: [8, 10000000]")
    proc = spx("run", str(write(tmp_path, text)), "--out", str(tmp_path / "out"))
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "more than this host can hold" in proc.stderr and "GiB" in proc.stderr and "10,000,000" in proc.stderr
    assert not (tmp_path / "out" / "logs").exists()


def test_a_dead_rank_points_at_the_log_with_its_traceback(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = spx("run", str(write(tmp_path, TINY)), "--out", str(tmp_path / "out"),
               env={"SPX_FAULT_INJECT_RANK": "1"})
    assert proc.returncode == EXIT_FAIL
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("rank 1 log"))
    path = Path(line.rsplit(": ", 1)[1])
    assert "traceback" in line.lower() and path.is_file() and "injected fault" in path.read_text()


def test_an_empty_log_of_a_killed_rank_says_so(tmp_path: Path) -> None:
    from spx.runner.forensics import RankFailure, traceback_log

    (tmp_path / "rank1.stderr.log").write_text("")
    (tmp_path / "rank1.stdout.log").write_text("")
    path, what = traceback_log(RankFailure(1, -9, "killed by signal SIGKILL", None, str(tmp_path / "rank1.stderr.log")))
    assert path == str(tmp_path / "rank1.stderr.log") and "out-of-memory" in what
    (tmp_path / "rank1.stdout.log").write_text("Traceback (most recent call last): ...")
    assert traceback_log(RankFailure(1, 1, "x", None, str(tmp_path / "rank1.stderr.log")))[1] == "its stdout"


# 6. A partial run recommends nothing its points cannot support -------------------------------------------------


def test_interrupted_after_one_point_publishes_no_threshold(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "out"
    proc = spx("run", str(write(tmp_path, TINY)), "--out", str(out),
               env={"SPX_FAULT_INJECT_RANK": "0", "SPX_FAULT_INJECT_TOKENS": "32"})
    assert proc.returncode == EXIT_FAIL
    status = json.loads((out / "status.json").read_text())
    assert status["phase"] == "Failed" and "verdict" not in status
    assert "recommendedThresholdTokens" not in status["kernel"]
    assert status["kernel"]["crossoverConfidence"] != "resolved"
    assert "partial run: 1 of 2 token counts" in status["message"]
    assert "PARTIAL RUN" in proc.stdout and "recommended threshold: none" in proc.stdout
    report = spx("report", str(out), "-o", "json")
    doc = json.loads(report.stdout)
    assert doc["partial"] is True and "verdict" not in doc and "recommendedThresholdTokens" not in doc["kernel"]


# 7. Ctrl-C during start-up; spx operator without a cluster -----------------------------------------------------


def test_ctrl_c_during_start_up_prints_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "exp.yaml"
    os.mkfifo(fifo)  # `spx run` blocks reading it: deterministically in start-up
    exe = Path(sys.executable).with_name("spx")
    proc = subprocess.Popen([str(exe), "run", str(fifo), "--out", str(tmp_path / "out")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until it has opened the FIFO for reading
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.05)
            continue
        break
    else:
        proc.kill()
        pytest.fail("spx run never opened the experiment file")
    proc.send_signal(signal.SIGINT)
    # End the file too: a SIGINT that lands just as spx's open() returns is taken by Python's C handler before
    # the read() starts, and the KeyboardInterrupt waits for the next bytecode check — after a read() that
    # would otherwise block for ever (1 run in ~6 hung here). EOF lets that read return.
    os.close(fd)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "interrupted" in err


def test_operator_without_a_cluster_prints_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "KUBECONFIG": str(tmp_path / "no-such-kubeconfig")}
    proc = spx("operator", env={**env, "KUBERNETES_SERVICE_HOST": ""}, timeout=60)
    assert proc.returncode == EXIT_UNREACHABLE
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "no Kubernetes credentials" in proc.stderr


# 8. Exit codes: one table --------------------------------------------------------------------------------------


def test_usage_errors_exit_3_everywhere(tmp_path: Path) -> None:
    assert spx("run").returncode == EXIT_USAGE  # argparse
    assert spx("frobnicate").returncode == EXIT_USAGE
    assert spx("validate", str(tmp_path / "nope.yaml")).returncode == EXIT_USAGE
    assert spx("gate", str(tmp_path / "nope.json")).returncode == EXIT_USAGE
    assert spx("run", str(write(tmp_path, TINY)), "--nproc", "0").returncode == EXIT_USAGE


def test_one_documented_table_shared_by_the_script() -> None:
    from spx.api.exit_codes import TABLE

    doc = (REPO / "docs" / "cli.md").read_text()
    script = (REPO / "examples" / "gating" / "wait-for-verdict.sh").read_text()
    for code, name, _ in TABLE:
        assert f"| {code} | `{name}` |" in doc, f"docs/cli.md lacks exit code {code}"
    for code in (0, 1, 2, 3, 4):
        assert f"#   {code}  " in script
    assert "EXIT_USAGE=3" in script and "EXIT_UNREACHABLE=4" in script


# 9. Silent acceptances become errors or warnings ---------------------------------------------------------------


def test_serving_flag_without_spec_serving_is_an_error(tmp_path: Path) -> None:
    proc = spx("run", str(write(tmp_path, TINY)), "--out", str(tmp_path / "out"), "--serving")
    assert proc.returncode == EXIT_USAGE and "has no spec.serving" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_duplicate_keys_are_an_error_naming_both_lines(tmp_path: Path) -> None:
    text = HEAD + "metadata: {name: t}\nspec:\n  gate: {thresholdTokens: 1024}\n  gate: {thresholdTokens: 4096}\n"
    proc = spx("validate", str(write(tmp_path, text)))
    assert proc.returncode == EXIT_USAGE
    assert "line 6: duplicate key 'gate' (first at line 5)" in proc.stderr


@pytest.mark.parametrize(("labels", "ok"), [
    ("{team: ml, app.kubernetes.io/name: spx}", True),
    ("{team: ''}", True),  # an empty value is allowed
    ("{'bad key': x}", False),
    ("{team: 'has space'}", False),
    ("{team: " + "a" * 64 + "}", False),
    ("{UPPER.example.com/x: y}", False),
])
def test_labels_are_validated_like_the_api_server(tmp_path: Path, labels: str, ok: bool) -> None:
    proc = spx("validate", str(write(tmp_path, HEAD + f"metadata: {{name: t, labels: {labels}}}\nspec: {{}}\n")))
    assert (proc.returncode == EXIT_OK) == ok, proc.stderr
    if not ok:
        assert "metadata.labels" in proc.stderr


def test_report_experiment_relabelling_warns(tmp_path: Path) -> None:
    from spx_testing.factories import kernel_result

    (tmp_path / "result.json").write_text(kernel_result(tp=2).model_dump_json(by_alias=True))
    other = write(tmp_path, HEAD + "metadata: {name: other}\nspec:\n  parallelism: {tensorParallelSize: 8}\n",
                  "other.yaml")
    proc = spx("report", str(tmp_path), "--experiment", str(other), "--no-plot")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "warning:" in proc.stderr and "tensorParallelSize 8 but the run measured TP2" in proc.stderr
    assert "TP2 on" in proc.stdout  # the measurement's TP is kept in the title


def test_spx_runs_is_ignored_by_git() -> None:
    proc = subprocess.run(["git", "check-ignore", "-q", "spx-runs/x/result.json"], cwd=REPO, timeout=30)
    assert proc.returncode == 0


# 10. Set-up scripts -------------------------------------------------------------------------------------------


def test_quickstart_never_replaces_a_gpu_run() -> None:
    """Only the CPU smoke run is replaced on a re-run; the GPU run refuses an spx-out holding a run."""
    runs = [ln for ln in (REPO / "scripts" / "quickstart.sh").read_text().splitlines() if "spx run" in ln
            and not ln.lstrip().startswith("#")]
    gpu = [ln for ln in runs if "deepseek-v41-tp8.yaml" in ln]
    cpu = [ln for ln in runs if "quickstart.yaml" in ln]
    assert len(gpu) == 1 and "--overwrite" not in gpu[0]
    assert len(cpu) == 1 and "--overwrite" in cpu[0]


def test_quickstart_installs_only_what_it_needs() -> None:
    quick = (REPO / "scripts" / "quickstart.sh").read_text()
    assert "setup.sh --quickstart" in quick and "apt-get" not in quick
    setup = (REPO / "scripts" / "setup.sh").read_text()
    apt_lines = [ln for ln in setup.splitlines() if "apt-get" in ln and not ln.lstrip().startswith(("#", "echo"))
                 and ("install" in ln or "update" in ln)]
    assert apt_lines and all("DPkg::Lock::Timeout=" in ln for ln in apt_lines)
    assert "waiting up to" in setup  # it says what it is doing
    proc = subprocess.run(["bash", "-n", str(REPO / "scripts" / "setup.sh")], timeout=30)
    assert proc.returncode == 0
