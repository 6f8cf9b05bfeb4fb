"""``spx run`` as a real process meets signals, closed pipes and early refusals (the installed console script).

No fixed sleeps: each test waits on an event (a line on stderr, the process' exit) bounded by a
generous deadline, so a loaded machine only makes them slower.
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

from spx.api.exit_codes import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from spx_testing.specs import EXPERIMENT_HEAD, TINY_CPU_YAML

REPO = Path(__file__).resolve().parents[2]
SPX = str(Path(sys.executable).with_name("spx"))
HEAD, TINY = EXPERIMENT_HEAD, TINY_CPU_YAML
#: Many samples at several sizes: still running long after its ranks have started.
#: A sweep too large for any host's memory: refused after --out is locked, before any rank starts.
HUGE = TINY.replace("hiddenSize: 256, outputSizes: [128]", "hiddenSize: 5120, outputSizes: [1280, 512]").replace(
    "tokens: [8, 32]", "tokens: [8, 10000000]")
SLOW = TINY.replace("samples: 5", "samples: 10000").replace("tokens: [8, 32]", "tokens: [8, 32, 64, 128, 256, 512]").replace(
    "timeoutSeconds: 300", "timeoutSeconds: 86400")  # (long enough for any estimate: it is meant to run long)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}


#: Ranks of TINY/SLOW: tensorParallelSize 2 on CPU starts 2 gloo ranks (``spx.runner.sizing.default_nproc``).
RANKS = 2


def _ignores_sigint(pid: int) -> bool:
    """Whether ``pid`` ignores SIGINT now (the ``SigIgn`` mask of ``/proc/<pid>/status``, Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    raise AssertionError(f"/proc/{pid}/status has no SigIgn line")


def _spawned_ranks(pid: int) -> list[int]:
    """Children of ``pid`` that are multiprocessing ``spawn`` processes past their ``exec`` (the ranks:
    ``python -c 'from multiprocessing.spawn import spawn_main; …'``), from ``/proc`` (Linux)."""
    ranks = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])  # field 4, after "(comm)"
            if ppid == pid and b"spawn_main" in (entry / "cmdline").read_bytes():
                ranks.append(int(entry.name))
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
    return ranks


def _ranks_started(pid: int) -> bool:
    """Every rank of ``pid`` is spawned and ``pid`` handles SIGINT again: it ignores SIGINT for each
    ``fork``/``exec`` of a rank (``spx.runner.launch.ranks_ignore_terminal_interrupt``), so a Ctrl-C
    sent in that window is dropped; after the last rank's spawn nothing ignores it any more."""
    try:
        return len(_spawned_ranks(pid)) >= RANKS and not _ignores_sigint(pid)
    except OSError:  # pid has ended
        return False


def test_ctrl_c_while_the_ranks_start_prints_no_traceback(tmp_path: Path) -> None:
    """SIGINT to the whole process group (what a terminal's Ctrl-C does) once the ranks are spawned, while
    they are still importing torch: exit 130, the partial handling, and no traceback.

    It waits for the ranks' processes and for ``spx run`` to handle SIGINT again (:func:`_ranks_started`),
    not for a rank's log file (a rank opens it once it has imported torch, too late for this test), and
    not at a fixed delay: a SIGINT that lands inside a spawn's ``fork``/``exec`` is dropped by design."""
    pytest.importorskip("torch")
    spec = tmp_path / "slow.yaml"
    spec.write_text(SLOW)
    out = tmp_path / "out"
    proc = subprocess.Popen([SPX, "run", str(spec), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    assert proc.stderr is not None
    seen = []
    try:
        for line in proc.stderr:  # blocks until the line comes (or the process ends)
            seen.append(line)
            if line.startswith("spx: starting"):
                break
        else:
            pytest.fail("spx run ended before it started its ranks: " + "".join(seen))
        deadline = time.monotonic() + 120
        while not _ranks_started(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # polling for an event (the ranks' processes), bounded by the deadline
        assert _ranks_started(proc.pid), "the ranks were never started: " + "".join(seen)
        os.killpg(proc.pid, signal.SIGINT)  # the ranks are importing torch in multiprocessing/spawn.py now
        out_text, rest = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = "".join(seen) + rest
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "interrupted (SIGINT)" in err
    assert "Traceback" not in out_text
    status = json.loads((out / "status.json").read_text())
    assert status["phase"] == "Failed" and "verdict" not in status


def test_a_closed_stdout_does_not_fail_a_good_run(tmp_path: Path) -> None:
    """``spx run ok.yaml | head -1`` with the reader gone before the first byte: the run still succeeds,
    writes its plot and says once on stderr that stdout was closed."""
    pytest.importorskip("torch")
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    out = tmp_path / "out"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone: every write to stdout is EPIPE
    try:
        proc = subprocess.run([SPX, "run", str(spec), "--out", str(out)], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, env=_env(), timeout=300)
    finally:
        os.close(write_end)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads((out / "status.json").read_text())["phase"] == "Succeeded"
    assert (out / "crossover.png").stat().st_size > 0
    assert "Traceback" not in proc.stderr and "stdout was closed" in proc.stderr


def test_a_closed_stdout_with_jsonl_still_writes_the_results(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    out = tmp_path / "out"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([SPX, "run", str(spec), "--out", str(out), "--jsonl"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=_env(), timeout=300)
    finally:
        os.close(write_end)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads((out / "result.json").read_text())["complete"] is True
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("nested", [False, True], ids=["out", "out-with-new-parents"])
def test_an_early_refusal_leaves_no_empty_out_directory(tmp_path: Path, nested: bool) -> None:
    """A refusal after ``--out`` was locked (here: a sweep too large for this host's memory) removes the
    folders the run created."""
    pytest.importorskip("torch")
    spec = tmp_path / "huge.yaml"
    spec.write_text(HUGE)
    out = tmp_path / "a" / "b" / "out" if nested else tmp_path / "out"
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(out)], capture_output=True, text=True, env=_env(),
                          timeout=300)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert not out.exists()
    assert not (tmp_path / "a").exists()


def test_an_early_refusal_keeps_an_existing_out_directory(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    spec = tmp_path / "huge.yaml"
    spec.write_text(HUGE)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(out)], capture_output=True, text=True, env=_env(),
                          timeout=300)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert out.is_dir() and list(out.iterdir()) == []


def _closed_pipe() -> int:
    """The write end of a pipe whose reader has gone (``… | head -1`` after its line): every write is EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


def test_a_closed_stderr_does_not_fail_a_good_run(tmp_path: Path) -> None:
    """``spx run ok.yaml 2>&1 >report.txt | head -1``: the progress lines are dropped quietly; the run finishes,
    writes every file, prints its report on stdout and exits with its own code (rich's broken-pipe
    ``SystemExit(1)`` and a dead progress thread used to leave only ``logs/`` and ``points.partial.jsonl``)."""
    pytest.importorskip("torch")
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    out = tmp_path / "out"
    stderr = _closed_pipe()
    try:
        proc = subprocess.run([SPX, "run", str(spec), "--out", str(out)], stdout=subprocess.PIPE, stderr=stderr,
                              text=True, env=_env(), timeout=300)
    finally:
        os.close(stderr)
    assert proc.returncode == EXIT_OK, proc.stdout
    assert json.loads((out / "status.json").read_text())["phase"] == "Succeeded"
    assert json.loads((out / "result.json").read_text())["complete"] is True
    assert (out / "crossover.png").stat().st_size > 0
    assert "tiny: TP2 on CPU" in proc.stdout and f"results: {out / 'status.json'}" in proc.stdout


def test_jsonl_with_stdout_and_stderr_closed_still_writes_the_results(tmp_path: Path) -> None:
    """``spx run ok.yaml --jsonl 2>&1 | head -1``: both streams are the closed pipe; the run still finishes."""
    pytest.importorskip("torch")
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    out = tmp_path / "out"
    both = _closed_pipe()
    try:
        proc = subprocess.run([SPX, "run", str(spec), "--out", str(out), "--jsonl"], stdout=both, stderr=both,
                              env=_env(), timeout=300)
    finally:
        os.close(both)
    assert proc.returncode == EXIT_OK
    assert json.loads((out / "status.json").read_text())["phase"] == "Succeeded"
    assert json.loads((out / "result.json").read_text())["complete"] is True
    assert not (out / "points.partial.jsonl").exists()


def test_a_refused_run_with_a_closed_stderr_keeps_its_exit_code(tmp_path: Path) -> None:
    """The error line cannot be shown, but the exit code is still the refusal's (3), not rich's 1."""
    pytest.importorskip("torch")
    spec = tmp_path / "huge.yaml"
    spec.write_text(HUGE)
    stderr = _closed_pipe()
    try:
        proc = subprocess.run([SPX, "run", str(spec), "--out", str(tmp_path / "out")], stdout=subprocess.PIPE,
                              stderr=stderr, text=True, env=_env(), timeout=300)
    finally:
        os.close(stderr)
    assert proc.returncode == EXIT_USAGE, proc.stdout


def _earlier_run(out: Path) -> dict[str, str]:
    """An earlier run's files in ``out`` (their content is what a refused ``--overwrite`` must keep), with the
    manifest a run writes of them (:meth:`spx.rundir.RunDirectory.finish`: ``--overwrite`` replaces only those)."""
    from spx.rundir import RunDirectory

    files = {"result.json": '{"earlier": "result"}\n', "status.json": '{"earlier": "status"}\n',
             "crossover.png": "png", "logs/rank0.stderr.log": "earlier log\n"}
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    RunDirectory(out).finish()
    return _files(out)


def _files(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_bytes().decode(errors="replace") for p in out.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("spec_text", "flags"), [(TINY, ["--nproc", "1"]), (HUGE, [])], ids=["gloo-1-rank", "too-big"])
def test_a_refused_overwrite_keeps_the_earlier_run(tmp_path: Path, spec_text: str, flags: list[str]) -> None:
    """``--overwrite`` with a run refused by its pre-start checks (gloo needs 2 ranks; a sweep this host cannot
    hold): exit 3 and the earlier run's files are all still there, unchanged (they used to be deleted first)."""
    pytest.importorskip("torch")
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text)
    out = tmp_path / "out"
    earlier = _earlier_run(out)
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(out), "--overwrite", *flags], capture_output=True,
                          text=True, env=_env(), timeout=300)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert _files(out) == earlier
    assert f"nothing was measured: the earlier run in {out} is kept (this run's empty result and logs are dropped)" \
        in proc.stderr


def test_ctrl_c_before_the_first_point_keeps_the_earlier_run(tmp_path: Path) -> None:
    """``--overwrite``, then Ctrl-C once the ranks are started, long before the first of SLOW's points: exit 130
    and the earlier run comes back in place of the empty one."""
    pytest.importorskip("torch")
    spec = tmp_path / "slow.yaml"
    spec.write_text(SLOW)
    out = tmp_path / "out"
    earlier = _earlier_run(out)
    proc = subprocess.Popen([SPX, "run", str(spec), "--out", str(out), "--overwrite"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _ranks_started(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # polling for an event (the ranks' processes), bounded by the deadline
        assert _ranks_started(proc.pid), "the ranks were never started"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert _files(out) == earlier, err


def test_an_overwrite_that_measures_replaces_the_earlier_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    out = tmp_path / "out"
    _earlier_run(out)
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(out), "--overwrite"], capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads((out / "result.json").read_text())["complete"] is True
    assert "earlier log\n" not in _files(out).values() and not (out / ".spx-replaced").exists()


def test_the_nproc_note_goes_to_stderr(tmp_path: Path) -> None:
    """``--nproc 100`` on a TP2 spec: the note that it was capped is a diagnostic, so stdout keeps only the report."""
    pytest.importorskip("torch")
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(tmp_path / "out"), "--nproc", "100"],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "note: --nproc 100 capped at tensorParallelSize 2" in proc.stderr
    assert "capped" not in proc.stdout


def test_a_disk_that_fills_up_fails_the_run_with_one_clear_line(tmp_path: Path) -> None:
    """Files under --out may grow to 2,000 bytes only (RLIMIT_FSIZE: the kernel's EFBIG, as a full disk's
    ENOSPC, on the first write past it): the run fails (exit 1, not 3: the input was fine) and says so once,
    without a traceback per launcher log record."""
    pytest.importorskip("torch")
    import resource

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(tmp_path / "out")], preexec_fn=limit,
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == EXIT_FAIL, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the run failed: cannot write results under") and "free space" in last
    assert "--- Logging error ---" not in proc.stderr and "Traceback" not in proc.stderr
