"""``spx gate`` on input that is not what it expects: files that are not a status (exit 3 at once, saying
what the file is), kubeconfigs that cannot be read (exit 4, one line naming the file), names that are not
Kubernetes object names (exit 3 before any cluster is contacted). ``spx operator`` shares the kubeconfig
path. Everything runs the real ``spx`` entry point on real files under ``tmp_path``; the "cluster" is a
kubeconfig whose server refuses connections (as in tests/gating/test_gate.py): a test that contacted it
would exit 4, not 3.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from spx.analysis import judge
from spx.api.exit_codes import EXIT_UNDECIDED, EXIT_UNREACHABLE, EXIT_USAGE
from spx.cli import main
from spx.runner.experiment import build_status
from spx_testing.factories import kernel_result


def run_dir(tmp_path: Path) -> Path:
    """A real run's output: result.json and status.json as `spx run` writes them."""
    out = tmp_path / "r1"
    out.mkdir()
    result = kernel_result()
    (out / "result.json").write_text(result.model_dump_json(by_alias=True))
    (out / "status.json").write_text(build_status(result, judge(result, result.spec)).model_dump_json(by_alias=True))
    return out


# ---------------------------------------------------------------- 1. a file that is not a status: exit 3 at once

NOT_A_STATUS = [
    # (id, file name, content, fragment of the error)
    ("result.json", "r1/result.json", None, "r1/result.json is a run's result, not a status: pass r1/status.json "
                                            "or the run directory r1"),
    ("other keys", "a.json", {"a": 1}, "a.json is not an experiment status (it has none of phase"),
    ("empty object", "e.json", {}, "e.json is an empty JSON object, not an experiment status"),
    ("a list", "l.json", [1, 2], "expected a JSON object (an ExperimentStatus), got a JSON list"),
    ("a report document", "rep.json", {"schemaVersion": "spx.dev/cli-report/v1", "source": "x"},
     "is a spx.dev/cli-report/v1 document, not an experiment status"),
    ("another kind", "pod.json", {"kind": "Pod", "status": {"phase": "Running"}},
     "is a 'Pod' object, not a ShardedProjectionExperiment"),
    ("phase not a string", "p.json", {"phase": 5}, "phase must be a str in an experiment status (got '5')"),
    ("conditions not a list", "c.json", {"phase": "Running", "conditions": 5}, "conditions must be a list"),
    ("conditions of strings", "s.json", {"phase": "Running", "conditions": ["Decided"]},
     "conditions must be a list of mappings"),
]


@pytest.mark.parametrize(("name", "content", "fragment"), [c[1:] for c in NOT_A_STATUS], ids=[c[0] for c in NOT_A_STATUS])
def test_a_file_that_is_not_a_status_exits_3_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str,
    content: object, fragment: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    run_dir(tmp_path)
    if content is not None:
        Path(name).write_text(json.dumps(content))
    # taken for an undecided status, it would poll for 5 s and exit 2; a usage error ends the wait at once
    assert main(["gate", name, "--wait", "5", "--interval", "5"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert fragment in captured.err and captured.out == ""
    assert main(["gate", name, "-o", "json"]) == EXIT_USAGE
    doc = json.loads(capsys.readouterr().out)
    assert doc["exitCode"] == EXIT_USAGE and fragment in doc["message"]


@pytest.mark.parametrize("status", [
    {"phase": "Running", "conditions": []},
    {"phase": "Running", "conditions": [{"type": "Decided", "status": "False", "reason": "Running"}]},
], ids=["no conditions", "Decided False"])
def test_a_real_status_not_decided_yet_stays_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], status: dict[str, object]
) -> None:
    (tmp_path / "status.json").write_text(json.dumps(status))
    assert main(["gate", str(tmp_path)]) == EXIT_UNDECIDED
    assert capsys.readouterr().out.startswith("Undecided")


def test_a_kubectl_dump_before_the_first_reconcile_is_undecided(tmp_path: Path) -> None:
    dump = tmp_path / "x.json"
    dump.write_text(json.dumps({"apiVersion": "bench.spx.dev/v1alpha1", "kind": "ShardedProjectionExperiment",
                                "metadata": {"name": "x", "generation": 1}}))
    assert main(["gate", str(dump)]) == EXIT_UNDECIDED


def test_the_run_directory_and_its_status_json_still_decide(tmp_path: Path) -> None:
    out = run_dir(tmp_path)
    assert main(["gate", str(out)]) == main(["gate", str(out / "status.json")]) == 0  # the made-up sweep passes


# ---------------------------------------------------------------- 2. unreadable or malformed kubeconfigs: exit 4


def refused_server() -> str:
    """The URL of a port nothing listens on (bound, then closed): connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def kubeconfig_text(server: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
        "users": [{"name": "u", "user": {}}],
    })


BAD_KUBECONFIGS = [
    # (id, content, fragment of the one-line error after "kubeconfig PATH")
    ("binary", bytes(range(128, 256)) * 8, "is not a UTF-8 text file (byte 0x80 at offset 0)"),
    ("not YAML", b"clusters: [a\n  b: {", "is malformed: not valid YAML ("),
    ("a YAML list", b"- 1\n- 2\n", "is malformed: expected a mapping with clusters, contexts and users, got a YAML list"),
    ("empty", b"", "is malformed: the file is empty"),
    ("clusters not a list", b"clusters: 5\n", "is malformed: clusters must be a list of entries, each with a name"),
    ("contexts without names", b"contexts: [{context: {cluster: c}}]\n", "is malformed: contexts must be a list"),
    ("no current context", b"clusters: []\ncontexts: []\nusers: []\n", "current-context"),
]


@pytest.fixture
def no_cluster_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Not in a pod, no ~/.kube/config: only the kubeconfig a test names is read."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.mark.usefixtures("no_cluster_env")
@pytest.mark.parametrize(("content", "fragment"), [c[1:] for c in BAD_KUBECONFIGS], ids=[c[0] for c in BAD_KUBECONFIGS])
@pytest.mark.parametrize("how", ["--kubeconfig", "KUBECONFIG"])
def test_a_bad_kubeconfig_is_one_line_and_exit_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], content: bytes,
    fragment: str, how: str,
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    if how == "KUBECONFIG":
        monkeypatch.setenv("KUBECONFIG", str(path))
        args = ["gate", "h200-tp8"]
    else:
        args = ["gate", "h200-tp8", "--kubeconfig", str(path)]
    assert main(args) == EXIT_UNREACHABLE
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: kubeconfig {path}") and fragment in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "not in a pod" not in err


@pytest.mark.usefixtures("no_cluster_env")
def test_an_unreadable_kubeconfig_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "kube"
    folder.mkdir()
    assert main(["gate", "h200-tp8", "--kubeconfig", str(folder)]) == EXIT_UNREACHABLE
    assert f"kubeconfig {folder}: cannot read it: Is a directory" in capsys.readouterr().err
    assert main(["gate", "h200-tp8", "--kubeconfig", str(tmp_path / "nope")]) == EXIT_UNREACHABLE
    assert f"kubeconfig {tmp_path / 'nope'}: no such file" in capsys.readouterr().err


@pytest.mark.usefixtures("no_cluster_env")
def test_no_kubeconfig_at_all_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    assert main(["gate", "h200-tp8"]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert f"no kubeconfig (looked at $KUBECONFIG={tmp_path / 'absent'}) and not in a pod" in err


@pytest.mark.usefixtures("no_cluster_env")
def test_a_good_kubeconfig_still_reaches_for_the_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text(refused_server()))
    assert main(["gate", "h200-tp8", "--kubeconfig", str(path)]) == EXIT_UNREACHABLE
    assert "cannot reach the cluster reading ml/h200-tp8" in capsys.readouterr().err  # the context's namespace


@pytest.mark.usefixtures("no_cluster_env")
@pytest.mark.parametrize(("content", "fragment"), [c[1:] for c in BAD_KUBECONFIGS[:3]], ids=[c[0] for c in BAD_KUBECONFIGS[:3]])
def test_spx_operator_shares_the_kubeconfig_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], content: bytes, fragment: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert main(["operator"]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: spx operator: kubeconfig {path}") and fragment in err, err
    assert len(err.splitlines()) == 1


class Retried(BaseException):
    """Raised by the stand-in for ``time.sleep`` in :mod:`spx.cli.gate`: ``--wait`` was about to poll again (a
    ``BaseException``, as ``KeyboardInterrupt``: ``spx`` turns an unexpected ``Exception`` into exit 70)."""


@pytest.mark.usefixtures("no_cluster_env")
@pytest.mark.parametrize(("kubeconfig", "retried"), [
    (bytes(range(128, 256)), False),  # a kubeconfig that cannot be used: waiting cannot fix it
    (b"clusters: 5\n", False),
    (None, True),  # a cluster that refuses connections: it may come back, so --wait polls again
])
def test_wait_retries_a_cluster_but_not_a_broken_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kubeconfig: bytes | None,
    retried: bool,
) -> None:
    from spx.cli import gate

    def no_sleep(seconds: float) -> None:
        raise Retried(seconds)

    monkeypatch.setattr(gate.time, "sleep", no_sleep)  # the only wait between polls: no wall-clock time passes
    path = tmp_path / "kubeconfig"
    path.write_bytes(kubeconfig if kubeconfig is not None else kubeconfig_text(refused_server()).encode())
    args = ["gate", "h200-tp8", "--kubeconfig", str(path), "--wait", "3600", "--interval", "5"]
    if retried:
        with pytest.raises(Retried):
            main(args)
    else:
        assert main(args) == EXIT_UNREACHABLE
        assert capsys.readouterr().err.startswith(f"error: kubeconfig {path}")


# ---------------------------------------------------------------- 3. a NAME that is not an object name: exit 3


BAD_NAMES = [
    # (id, args, fragment)
    ("upper case and !", ["Bad_Name!"], "NAME 'Bad_Name!' is not a valid experiment name"),
    ("underscore", ["h200_tp8"], "DNS-1123 subdomain"),
    ("leading dash", ["-x"], None),  # argparse: an unknown option, usage error
    ("trailing dot", ["h200."], "NAME 'h200.' is not a valid experiment name"),
    ("too long", ["a" * 254], "at most 253"),
    ("newline", ["h200\n"], "is not a valid experiment name"),
    ("bad namespace", ["h200-tp8", "-n", "ML_Bench"], "-n/--namespace 'ML_Bench' is not a valid namespace name"),
]


@pytest.mark.usefixtures("no_cluster_env")
@pytest.mark.parametrize(("args", "fragment"), [c[1:] for c in BAD_NAMES], ids=[c[0] for c in BAD_NAMES])
def test_an_invalid_name_is_refused_before_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
    fragment: str | None,
) -> None:
    monkeypatch.chdir(tmp_path)  # no file of that name here
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text(refused_server()))  # contacting it would be exit 4
    assert main(["gate", *args, "--kubeconfig", str(kubeconfig)]) == EXIT_USAGE
    err = capsys.readouterr().err
    if fragment is not None:
        assert fragment in err and "cannot reach" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.usefixtures("no_cluster_env")
@pytest.mark.parametrize("name", ["h200-tp8", "a", "v0.34.h200", "x" * 253])
def test_a_valid_name_is_looked_up(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text(refused_server()))
    assert main(["gate", name, "--kubeconfig", str(kubeconfig)]) == EXIT_UNREACHABLE
    assert "cannot reach the cluster" in capsys.readouterr().err
