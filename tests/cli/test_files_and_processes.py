"""Nothing lost, nothing left running: ``spx run`` as a real process meets ``kill -9``, a full disk, an
``--overwrite`` over files it did not write, and a sweep over its own time limit (issue 29, items 1-3 and 5).

Real ``spx`` subprocesses, real signals, a real file-size limit (``RLIMIT_FSIZE``: the kernel's ``EFBIG`` on the
first write past it, as a full disk's ``ENOSPC``). No fixed sleeps: each test polls for an event (a process,
a line in a file) bounded by a generous deadline, so a loaded machine only makes them slower.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spx.api.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNDECIDED, EXIT_USAGE
from spx_testing.specs import TINY_CPU_YAML

SPX = str(Path(sys.executable).with_name("spx"))
TINY = TINY_CPU_YAML
#: Many samples at several sizes: still running long after its first point.
SLOW = TINY.replace("samples: 5", "samples: 10000").replace("tokens: [8, 32]", "tokens: [8, 32, 64, 128, 256, 512, 1024, 2048]").replace(
    "timeoutSeconds: 300", "timeoutSeconds: 86400")  # (long enough for any estimate: it is meant to run long)
RANKS = 2


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}


def _poll(what: str, ready: Callable[[], bool], timeout: float = 180.0) -> None:
    """Wait for ``ready()`` (polling, bounded by ``timeout`` seconds); fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.05)


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` fields after ``(comm)`` (state first), ``None`` when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """A process that still runs (a zombie has ended: only its exit status waits to be reaped)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _ranks_of(pid: int) -> list[int]:
    """The ranks ``pid`` spawned: its children running multiprocessing's ``spawn_main`` (Linux ``/proc``)."""
    ranks = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None and int(fields[1]) == pid:
            try:
                if b"spawn_main" in (entry / "cmdline").read_bytes():
                    ranks.append(int(entry.name))
            except OSError:
                continue
    return ranks


def _lines(path: Path) -> int:
    try:
        return sum(1 for line in path.read_bytes().splitlines() if line.strip())
    except OSError:
        return 0


def test_kill_9_of_spx_run_ends_its_ranks(tmp_path: Path) -> None:
    """``spx run … & kill -9 $!`` once the ranks measure (a point is in ``points.partial.jsonl``): both ranks end
    within seconds (they used to run their whole sweep at ~95 % CPU each, then hang); nothing is left running."""
    pytest.importorskip("torch")
    spec = tmp_path / "slow.yaml"
    spec.write_text(SLOW)
    out = tmp_path / "out"
    proc = subprocess.Popen([SPX, "run", str(spec), "--out", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_env(), start_new_session=True)
    ranks: list[int] = []
    try:
        _poll("the first point", lambda: _lines(out / "points.partial.jsonl") >= 1 or proc.poll() is not None, 300)
        assert proc.poll() is None, "the run ended before it could be killed"
        ranks = _ranks_of(proc.pid)
        assert len(ranks) == RANKS, ranks
        proc.kill()  # SIGKILL: nothing of spx run's own runs after it
        proc.wait()
        _poll("the ranks ending after their parent was killed", lambda: not any(_alive(r) for r in ranks), 60)
    finally:
        for pid in [proc.pid, *ranks]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    _after_a_kill(spec, out)


def _after_a_kill(spec: Path, out: Path) -> None:
    """What the killed run left (issue 37): ``spx report`` counts its points of the 8 it planned (it said "4 of
    4"), ``spx gate`` the same number; a ``logs/dmesg.txt`` saved afterwards is refused by ``--overwrite`` by name
    (the killed run's manifest claimed ``logs/`` whole and it was deleted, exit 0), and is still there."""
    manifest = json.loads((out / ".spx-manifest.json").read_text())
    assert manifest["complete"] is False and manifest["plannedTokens"] == [8, 32, 64, 128, 256, 512, 1024, 2048]
    assert "dirs" not in manifest and "logs/rank0.stderr.log" in manifest["files"], manifest
    from spx.rundir import parse_points

    n = len(parse_points((out / "points.partial.jsonl").read_bytes())[0])  # (a line cut by the kill is no point)
    report = subprocess.run([SPX, "report", str(out), "--no-plot"], capture_output=True, text=True, env=_env(),
                            timeout=600)
    assert report.returncode == EXIT_OK and f"{n} of 8 token counts" in report.stdout, report.stdout + report.stderr
    gate = subprocess.run([SPX, "gate", str(out)], capture_output=True, text=True, env=_env(), timeout=600)
    assert gate.returncode == EXIT_UNDECIDED and f"{n} measured point(s)" in gate.stdout and "of the 8" in gate.stdout
    (out / "logs" / "dmesg.txt").write_text("saved while investigating\n")
    again = subprocess.run([SPX, "run", str(spec), "--out", str(out), "--overwrite"], capture_output=True, text=True,
                           env=_env(), timeout=600)
    assert again.returncode == EXIT_USAGE and "logs/dmesg.txt" in again.stderr, again.stderr
    assert (out / "logs" / "dmesg.txt").read_text() == "saved while investigating\n"


def _fsize_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_leaves_no_half_written_result_and_report_and_gate_read_the_points(tmp_path: Path) -> None:
    """Files may grow to 3,000 bytes only (``RLIMIT_FSIZE``): the points (a line each) and the logs fit, the
    result document does not. No ``result.json`` is left (it used to be a 0-byte one), no temporary file either;
    ``spx report`` reports the kept points and says the result could not be written; ``spx gate`` says the run
    was not decided (exit 2), not "no such file"."""
    pytest.importorskip("torch")
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    out = tmp_path / "out"
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(out)], preexec_fn=_fsize_limit(3000),
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == EXIT_FAIL, proc.stderr
    assert not (out / "result.json").exists(), (out / "result.json").stat().st_size
    assert not [p.name for p in out.iterdir() if "spx-tmp" in p.name]
    assert _lines(out / "points.partial.jsonl") == 2, proc.stderr
    report = subprocess.run([SPX, "report", str(out), "--no-plot"], capture_output=True, text=True, env=_env(),
                            timeout=120)
    assert report.returncode == EXIT_OK, report.stderr
    assert "result.json was not written" in report.stderr and "points.partial.jsonl" in report.stderr
    assert "8" in report.stdout and "32" in report.stdout, report.stdout
    gate = subprocess.run([SPX, "gate", str(out)], capture_output=True, text=True, env=_env(), timeout=60)
    assert gate.returncode == EXIT_UNDECIDED, gate.stderr + gate.stdout
    assert "no such file" not in gate.stdout + gate.stderr
    assert "2 measured point(s) in points.partial.jsonl" in gate.stdout, gate.stdout


def test_status_and_result_are_written_whole_or_not_at_all(tmp_path: Path) -> None:
    """:func:`spx.files.write_atomic` under a file-size limit smaller than the document: the earlier file is
    untouched and no temporary file is left; within the limit the new content replaces it whole."""
    code = (
        "import sys\n"
        "from spx.files import write_atomic\n"
        "try:\n    write_atomic(sys.argv[1], 'x' * 5000)\nexcept OSError as e:\n    print(e.errno)\n"
        "write_atomic(sys.argv[1] + '.small', 'small')\n"
    )
    target = tmp_path / "status.json"
    target.write_text("earlier")
    proc = subprocess.run([sys.executable, "-c", code, str(target)], preexec_fn=_fsize_limit(1000),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "27"  # EFBIG
    assert target.read_text() == "earlier"
    assert (tmp_path / "status.json.small").read_text() == "small"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json", "status.json.small"]


def test_a_file_no_rename_can_replace_is_written_in_place(tmp_path: Path) -> None:
    """A device (``/dev/termination-log`` in a pod may be one, or a bind mount) is written in place, not replaced;
    a symbolic link's target is replaced and the link stays a link."""
    from spx.files import write_atomic

    write_atomic(os.devnull, "summary")
    assert Path(os.devnull).is_char_device()
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    write_atomic(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"


def _files(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()}


def test_overwrite_never_deletes_files_spx_did_not_write(tmp_path: Path) -> None:
    """The issue's repro: ``mkdir -p u/logs; echo k > u/logs/important.txt; echo '{}' > u/result.json; spx run …
    --out u --overwrite``: refused (exit 3) naming both files, and both are still there (important.txt used to be
    deleted)."""
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    out = tmp_path / "u"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "important.txt").write_text("k\n")
    (out / "result.json").write_text("{}\n")
    before = _files(out)
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(out), "--overwrite"], capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "files no spx run recorded writing" in proc.stderr
    assert "result.json" in proc.stderr and "logs/important.txt" in proc.stderr
    assert _files(out) == before


def test_overwrite_replaces_a_run_spx_wrote_and_keeps_the_users_other_files(tmp_path: Path) -> None:
    """A real run, then a file of the user's beside it (not where a run writes): ``--overwrite`` replaces the run
    (its manifest lists every file it wrote), keeps the user's file, and leaves a manifest of the new run."""
    pytest.importorskip("torch")
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    out = tmp_path / "out"
    for attempt in range(2):
        if attempt:
            (out / "notes.txt").write_text("mine\n")
        proc = subprocess.run([SPX, "run", str(spec), "--out", str(out), "--overwrite", "--tokens", "8"],
                              capture_output=True, text=True, env=_env(), timeout=300)
        assert proc.returncode == EXIT_OK, proc.stderr
    manifest = json.loads((out / ".spx-manifest.json").read_text())
    assert manifest["complete"] is True
    assert {"result.json", "status.json", "logs/rank0.stderr.log"} <= set(manifest["files"])
    assert "notes.txt" not in manifest["files"] and (out / "notes.txt").read_text() == "mine\n"


def test_a_sweep_over_its_own_time_limit_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    """An hours-long CPU sweep (``--device cpu``, so it is not refused as GPU-sized) with ``timeoutSeconds: 60``:
    exit 3 at once with the estimate and the limit; it used to burn both cores for 60 s and say "partial result
    kept (0 of 1)"."""
    pytest.importorskip("torch")
    long = TINY.replace("hiddenSize: 256, outputSizes: [128]", "hiddenSize: 5120, outputSizes: [1280, 512]").replace(
        "tokens: [8, 32]", "tokens: [16384]").replace("samples: 5", "samples: 5000").replace(
        "timeoutSeconds: 300", "timeoutSeconds: 60")
    spec = tmp_path / "long.yaml"
    spec.write_text(long)
    out = tmp_path / "out"
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(out)], capture_output=True, text=True, env=_env(),
                          timeout=300)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "cannot finish within its time limit: it would take ≈" in proc.stderr
    assert "spec.timeoutSeconds is 60 s" in proc.stderr
    assert "partial result kept" not in proc.stderr and not out.exists()


def test_a_run_that_measured_no_point_does_not_say_a_result_was_kept(tmp_path: Path) -> None:
    """A rank that fails before its first point (a fault injected at the first point's measurement): the failure
    names the rank and says no result was kept, never "partial result kept (0 of 2)"."""
    pytest.importorskip("torch")
    spec = tmp_path / "ok.yaml"
    spec.write_text(TINY)
    env = {**_env(), "SPX_FAULT_INJECT_RANK": "0"}  # (spx.bench.kernel: this rank raises at its first point)
    proc = subprocess.run([SPX, "run", str(spec), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == EXIT_FAIL, proc.stderr
    assert "partial result kept" not in proc.stderr
    assert "no token count was measured, so no result was kept" in proc.stderr
