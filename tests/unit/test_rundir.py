"""One reader and writer of a run folder (:class:`spx.rundir.RunDirectory`, issue 38 req 1; issue 37 reqs 2 and 4).

Real files in a temporary folder, real ``fcntl`` locks, a real file-size limit (``RLIMIT_FSIZE`` in a child
process: the kernel's ``EFBIG``, as a full disk's ``ENOSPC``). No mocks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spx.api.loading import kind_of
from spx.files import write_atomic
from spx.rundir import RunDirectory, RunDirectoryError, cannot_write, parse_points, read_json
from spx_testing.factories import kernel_result, point_result


def _point(tokens: int) -> str:
    """One point's JSON line, as rank 0 streams it (TP2)."""
    return point_result(tokens, [10.0] * 5, [8.0] * 5, tp=2).model_dump_json(by_alias=True)


@pytest.mark.parametrize(("doc", "kind"), [
    ({"schemaVersion": "spx.dev/kernel-result/v1", "points": []}, "result"),
    ({"points": [], "worldSize": 2}, "result"),
    ({"schemaVersion": "spx.dev/kernel-summary/v1"}, "summary"),
    ({"schemaVersion": "spx.dev/step-result/v1"}, "bench"),
    ({"schemaVersion": "spx.dev/serving-result/v1", "points": []}, "bench"),
    ({"schemaVersion": "spx.dev/run-files/v1", "files": []}, "manifest"),
    ({"apiVersion": "spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment"}, "object"),
    ({"phase": "Succeeded", "conditions": []}, "status"),
    ({"kernel": {"points": []}}, "status"),
    ({"verdict": "Pass"}, "status"),
    ({"phase": "Succeeded", "points": []}, "other"),
    ({"hello": 1}, "other"),
    ([1, 2], "other"),
    ("text", "other"),
], ids=lambda v: str(v)[:40])
def test_kind_of_is_the_one_what_is_this_file_test(doc: object, kind: str) -> None:
    assert kind_of(doc) == kind


@pytest.mark.parametrize(("content", "fragment"), [
    (b"{not json", "is not JSON"),
    (b"\xff\xfe", "is not a UTF-8 text file"),
    (b"[" * 100_000, "nests deeper than any spx document"),
], ids=["not JSON", "not UTF-8", "nested"])
def test_read_json_has_one_error_ladder(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "status.json"
    path.write_bytes(content)
    with pytest.raises(RunDirectoryError, match=fragment):
        read_json(path)
    with pytest.raises(RunDirectoryError, match="no such file"):
        read_json(tmp_path / "absent.json")
    with pytest.raises(RunDirectoryError, match="is a directory"):
        read_json(tmp_path)


def test_only_parseable_points_count(tmp_path: Path) -> None:
    """A line cut short by a kill or a full disk is not a point: gate and report count the same number."""
    good = [_point(t) for t in (8, 32, 64)]
    raw = ("\n".join(good) + "\n" + good[0][:20]).encode()
    points, bad = parse_points(raw)
    assert [p.tokens for p in points] == [8, 32, 64] and bad == 1
    run_dir = RunDirectory(tmp_path)
    run_dir.points_path.write_bytes(raw)
    assert run_dir.measured_points() == 3


def _killed_run(out: Path, planned: list[int], points: list[int]) -> RunDirectory:
    """A run that began recording, wrote its rank logs and some points, and was killed (no :meth:`finish`)."""
    run_dir = RunDirectory(out)
    out.mkdir(exist_ok=True)
    run_dir.begin(planned_tokens=planned)
    try:
        run_dir.fresh_outputs()
        for name in ("logs/launcher.log", "logs/rank0.stdout.log"):
            write_atomic(out / name, "log\n")
        run_dir.points_path.write_text("".join(_point(t) + "\n" for t in points))
    finally:
        run_dir.stop()  # (the process died: nothing after this line of it ran)
    return run_dir


def test_a_killed_runs_manifest_lists_files_never_directories(tmp_path: Path) -> None:
    """The manifest of a killed run lists the files it wrote, not ``logs/`` or ``serving/`` whole: a
    ``logs/dmesg.txt`` saved afterwards is refused by name by ``--overwrite`` (it used to be deleted, exit 0)."""
    out = tmp_path / "out"
    run_dir = _killed_run(out, [8, 32, 64, 128, 256, 512], [8, 32, 64, 128])
    manifest = json.loads((out / ".spx-manifest.json").read_text())
    assert manifest["complete"] is False and "dirs" not in manifest
    assert "logs/rank0.stdout.log" in manifest["files"] and not any(f.endswith("/") for f in manifest["files"])
    assert not any(f.startswith("serving") for f in manifest["files"])
    (out / "logs" / "dmesg.txt").write_text("the user's\n")
    with RunDirectory(out).locked(), pytest.raises(RunDirectoryError, match="logs/dmesg.txt"):
        run_dir.prepare(overwrite=True)
    assert (out / "logs" / "dmesg.txt").read_text() == "the user's\n"
    (out / "logs" / "dmesg.txt").unlink()
    with RunDirectory(out).locked():  # without the user's file the killed run is replaced
        aside = run_dir.prepare(overwrite=True)
        assert aside is not None and (aside / "logs" / "rank0.stdout.log").is_file()


def test_a_killed_run_says_how_many_of_its_planned_counts_it_measured(tmp_path: Path) -> None:
    run_dir = _killed_run(tmp_path / "out", [8, 32, 64, 128, 256, 512], [8, 32, 64, 128])
    killed = run_dir.killed()
    assert killed is not None and "4 measured point(s) in points.partial.jsonl, of the 6 token count(s)" in killed
    from spx.cli.report_load import load_run
    from spx.cli.tables import partial_extent

    run = load_run(run_dir.path)
    listed = set(run.spec.sweep.tokens)
    assert partial_extent(len(listed & {p.tokens for p in run.result.points}), len(listed)) == "4 of 6 token counts"


def test_a_result_json_that_holds_points_is_used(tmp_path: Path) -> None:
    """No status.json (the disk filled after result.json), no points file (removed after a complete sweep): the
    gate's message counts result.json's points, not "it measured no point"."""
    out = tmp_path / "out"
    out.mkdir()
    RunDirectory(out).write_result(kernel_result(tokens=(8, 32), tp=2, complete=True))
    killed = RunDirectory(out).killed()
    assert killed is not None and "2 measured point(s) in result.json" in killed, killed
    from spx.cli.gate import read_and_decide

    assert "2 measured point(s) in result.json" in read_and_decide(str(out)).message


def test_a_full_disk_at_the_start_is_a_clear_error(tmp_path: Path) -> None:
    """The manifest cannot be written (``RLIMIT_FSIZE`` 0: ``EFBIG`` on the first byte): "cannot write … free
    space", a :class:`RunDirectoryError` (exit 3), never an internal error."""
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0)); from spx.rundir import RunDirectory, RunDirectoryError\n"
            "try:\n    RunDirectory(sys.argv[1]).begin([8])\nexcept RunDirectoryError as e:\n    print(e); sys.exit(3)")
    (tmp_path / "out").mkdir()
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert "cannot write" in proc.stdout and "free space there" in proc.stdout, proc.stdout
    assert cannot_write("x", OSError(28, "No space left on device")).endswith("and run again")
