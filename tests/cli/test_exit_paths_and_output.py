"""The CLI's last exit paths and outputs as users meet them (issue 29, items 4 and 6): an exception no command
expected, an output encoding that cannot show ``×``/``µ``/``≈``, ``--out ""``, ``--plot a.svg``, ``spx crd`` into a
closed pipe, the first-experiment guide run as written after the quickstart, ``spx serving`` on a port already
taken, and the vLLM report lines.

Real ``spx`` subprocesses against real files (one real CPU run, shared by the module), a real listening socket.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spx.api.accuracy import AccuracyStatus
from spx.api.exit_codes import EXIT_INTERNAL, EXIT_OK, EXIT_PIPE, EXIT_UNDECIDED, EXIT_USAGE
from spx.api.serving import ServingPointStatus, ServingStatus
from spx.cli.run import vllm_report_lines
from spx_testing.specs import TINY_CPU_YAML

REPO = Path(__file__).resolve().parents[2]
SPX = str(Path(sys.executable).with_name("spx"))
#: An output that can show ASCII only, in the C locale: what a minimal container or a CI log may give spx.
ASCII = {"PYTHONIOENCODING": "ascii", "LANG": "C", "LC_ALL": "C"}


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("SPX_FAULT_INJECT")}, **extra}


def spx(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SPX, *args], capture_output=True, text=True, env=env or _env(), cwd=cwd, timeout=timeout,
                          errors="replace")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real CPU run (2 gloo ranks): its verdict is Inconclusive (CPU timings say nothing about GPUs)."""
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("cpu-run")
    (tmp / "tiny.yaml").write_text(TINY_CPU_YAML)
    proc = spx("run", str(tmp / "tiny.yaml"), "--out", str(tmp / "out"))
    assert proc.returncode == EXIT_OK, proc.stderr
    return tmp / "out"


# 4. no exit path outside a decided Fail returns 1 ------------------------------------------------------------------


def test_gate_and_report_of_an_inconclusive_run_degrade_characters_under_an_ascii_output(cpu_run: Path) -> None:
    """``PYTHONIOENCODING=ascii LANG=C``: ``spx gate`` exits 2 (Inconclusive) and ``spx report`` 0, with ASCII
    stand-ins for ``—``, ``×``, ``µ``; they used to print a UnicodeEncodeError traceback and exit 1 (gate's Fail)."""
    gate = spx("gate", str(cpu_run), env=_env(**ASCII))
    assert gate.returncode == EXIT_UNDECIDED, gate.stderr
    assert gate.stdout.startswith("Inconclusive: ") and " - " in gate.stdout, gate.stdout
    report = spx("report", str(cpu_run), "--no-plot", env=_env(**ASCII))
    assert report.returncode == EXIT_OK, report.stderr
    assert "replicated us" in report.stdout and "x " in report.stdout, report.stdout
    for out in (gate.stdout, gate.stderr, report.stdout, report.stderr):
        assert "Traceback" not in out and out.isascii()


def test_an_exception_no_command_expected_never_exits_1(tmp_path: Path) -> None:
    """``spx gate`` of a 48 MB status document with its address space capped (``RLIMIT_AS``) 150 MiB above what its
    imports take: json raises MemoryError, which no command handles. An uncaught exception exits 1, which a pipeline
    reads as Fail; now one line names it and the exit is 70 (internal), through ``spx gate`` and
    ``python -m spx.cli.gate``."""
    import resource

    big = tmp_path / "status.json"
    big.write_text('{"phase": "Running", "x": [' + ",".join(["1.5"] * 12_000_000) + "]}")
    probe = "import spx.cli, spx.cli.gate, json; print(open('/proc/self/status').read().split('VmSize:')[1].split()[0])"
    base_kib = int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)
    limit = (base_kib + 150 * 1024) * 1024

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    for argv in ([SPX, "gate", str(big)], [sys.executable, "-m", "spx.cli.gate", str(big)]):
        proc = subprocess.run(argv, capture_output=True, text=True, env=_env(**ASCII), timeout=120, preexec_fn=cap)
        assert proc.returncode == EXIT_INTERNAL, (argv, proc.returncode, proc.stderr)
        assert proc.stderr.startswith("error: spx stopped on an error no command expected (exit 70, never a verdict")
        assert "MemoryError" in proc.stderr and "Traceback" not in proc.stderr


# 6. the smaller ones ----------------------------------------------------------------------------------------------


def test_an_empty_out_is_refused(tmp_path: Path) -> None:
    """``--out ""`` used to write to spx-runs/NAME silently."""
    (tmp_path / "tiny.yaml").write_text(TINY_CPU_YAML)
    proc = spx("run", "tiny.yaml", "--out", "", cwd=tmp_path)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "--out '' is empty: give a directory" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


@pytest.mark.parametrize(("name", "head"), [("a.svg", b"<?xml"), ("a.pdf", b"%PDF"), ("a.PNG", b"\x89PNG")])
def test_report_plot_writes_the_format_its_extension_names(cpu_run: Path, tmp_path: Path, name: str,
                                                           head: bytes) -> None:
    """``spx report --plot a.svg`` used to write PNG bytes under any name."""
    proc = spx("report", str(cpu_run), "--plot", str(tmp_path / name))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert (tmp_path / name).read_bytes().startswith(head)
    assert [p.name for p in tmp_path.iterdir()] == [name]  # (no temporary file left beside it)


def test_report_plot_refuses_an_extension_that_names_no_format(cpu_run: Path, tmp_path: Path) -> None:
    proc = spx("report", str(cpu_run), "--plot", str(tmp_path / "a.txt"))
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "the extension '.txt' names no image format" in proc.stderr and ".svg" in proc.stderr
    assert not (tmp_path / "a.txt").exists()


def test_crd_exit_codes_are_the_ones_docs_cli_md_gives() -> None:
    """docs/cli.md: ``spx crd | true`` exits 141 (the reader is gone before the CRD, larger than a pipe holds, is
    written), ``spx crd | head -1`` exits 0 (head takes what is in the pipe first). It used to give ``| head -1``
    as the example of 141."""
    doc = (REPO / "docs" / "cli.md").read_text()
    assert "(`spx crd \\| true`" in doc and "`spx crd | head -1` exits 0" in doc
    codes = {}
    for reader in ("true", "head -1 >/dev/null"):
        proc = subprocess.run(["bash", "-c", f"{shlex.quote(SPX)} crd | {reader}; echo ${{PIPESTATUS[0]}}"],
                              capture_output=True, text=True, env=_env(), timeout=120)
        codes[reader] = int(proc.stdout.split()[-1])
    assert codes == {"true": EXIT_PIPE, "head -1 >/dev/null": EXIT_OK}


def _guide_commands() -> list[str]:
    """The ``.venv/bin/spx`` lines of docs/first-experiment.md's section 1, as written (comments dropped)."""
    text = (REPO / "docs" / "first-experiment.md").read_text()
    block = text.split("## 1.", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.startswith(".venv/bin/spx ")]


def test_the_first_experiment_guide_runs_as_written_after_the_quickstart(tmp_path: Path) -> None:
    """In a checkout where the quickstart wrote ``spx-out`` (its own command, ``--out spx-out --overwrite``), the
    guide's commands run as written: the quickstart experiment measures (exit 0), the GPU one is refused for this
    host's reasons only, never because its ``--out`` lies inside the quickstart's run; docs/gating.md reads the
    same folder the guide writes. Both used to fail ("inside the run directory spx-out")."""
    pytest.importorskip("torch")
    for name in ("examples",):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    quick = subprocess.run(["bash", "-c", ".venv/bin/spx run examples/quickstart.yaml --out spx-out --overwrite "
                            "--tokens 8"], capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=600)
    assert quick.returncode == EXIT_OK and (tmp_path / "spx-out" / "status.json").is_file(), quick.stderr
    commands = _guide_commands()
    assert len(commands) == 3 and "--out spx-runs/quickstart" in commands[0], commands
    for i, command in enumerate(commands):
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path, env=_env(),
                              timeout=900)
        assert "inside the run directory" not in proc.stderr, (command, proc.stderr)
        if i == 0:
            assert proc.returncode == EXIT_OK, (command, proc.stderr)
    h200 = re.search(r"--out (\S+)", commands[1])
    assert h200 is not None
    gating = (REPO / "docs" / "gating.md").read_text()
    assert f"spx gate {h200.group(1)} " in gating and f"spx run --out {h200.group(1)}`" in gating


def test_a_missing_backend_is_named_before_the_gpu_sized_rule(tmp_path: Path) -> None:
    """The V4.1 TP8 experiment with ``gather: vllm`` on this CPU host, 8 ranks: refused naming the missing vLLM
    first (it used to say only that the spec is GPU-sized, with a time estimate)."""
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here: no backend is missing")
    except ImportError:
        pass
    text = (REPO / "examples" / "deepseek-v41-tp8.yaml").read_text().replace("    gather: auto", "    gather: vllm")
    (tmp_path / "g.yaml").write_text(text)
    proc = spx("run", str(tmp_path / "g.yaml"), "--out", str(tmp_path / "out"), "--nproc", "8")
    assert proc.returncode == EXIT_USAGE, proc.stderr
    # (the example has a spec.serving section: a "note:" line on --serving may come first; the first error names vLLM)
    errors = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("note: "))
    assert errors.startswith("error: gemmBackend vllm needs an importable vLLM"), proc.stderr
    assert "import vllm failed" in proc.stderr and "GPU-sized" not in proc.stderr


def test_serving_on_a_port_already_taken_says_so_on_stderr(tmp_path: Path) -> None:
    """A real socket listens on the spec's serving port: ``spx serving`` refuses before any server starts (exit 3,
    the pre-flight of issue 37) and says on stderr that the port is in use (it used to exit 1 printing nothing;
    the cause was only in serving-result.json)."""
    doc = yaml.safe_load((REPO / "examples" / "deepseek-v41-tp8.yaml").read_text())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        doc["spec"]["serving"].update(host="127.0.0.1", port=port, shutdownTimeoutSeconds=1)
        (tmp_path / "srv.yaml").write_text(yaml.safe_dump(doc))
        proc = spx("serving", str(tmp_path / "srv.yaml"), "--out", str(tmp_path / "out"), "--vllm", "/bin/false")
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert f"spec.serving.port {port}: something already listens on 127.0.0.1:{port}" in proc.stderr
    assert "set spec.serving.port to a free port" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_vllm_report_lines_round_figures_and_name_gsm8k_once() -> None:
    """``spx run --serving`` printed ``main 22.346801250023418`` and ``GSM8K: GSM8K: …``."""
    serving = ServingStatus(gate_passed=True, points=[ServingPointStatus(
        name="p1", metric="ttft", unit="ms", main_mean=22.346801250023418, split_mean=20.1049999, change_pct=-10.03)])
    accuracy = AccuracyStatus(reasons=["GSM8K: the split's accuracy is within 1.0 points of main (drop 0.20)"])
    lines = vllm_report_lines(serving, accuracy)
    assert "  p1: ttft main 22.35 split 20.1 ms, change -10.03%" in lines
    assert lines[-1] == "GSM8K: the split's accuracy is within 1.0 points of main (drop 0.20)"
