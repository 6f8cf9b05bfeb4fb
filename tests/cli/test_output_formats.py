"""Issue 11 item 11: ``-o json|yaml`` on report, predict, validate and gate, one published JSON schema per
document (``docs/schemas/``, checked against the models and against each command's real output), and
shell completion."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from spx.cli.documents import DOCUMENTS, schema_text
from spx_testing.factories import kernel_result

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "docs" / "schemas"
QUICKSTART = REPO / "examples" / "quickstart.yaml"


def spx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).with_name("spx")), *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def schema(name: str) -> dict[str, object]:
    return json.loads((SCHEMAS / name).read_text())


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_published_schemas_match_the_models(name: str) -> None:
    assert (SCHEMAS / name).read_text() == schema_text(DOCUMENTS[name]), (
        f"docs/schemas/{name} is stale: run `python -m spx.cli.documents docs/schemas`")
    jsonschema.Draft202012Validator.check_schema(schema(name))


def check(doc: object, name: str) -> None:
    jsonschema.validate(doc, schema(name), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_validate(tmp_path: Path, fmt: str) -> None:
    ok = spx("validate", str(QUICKSTART), "-o", fmt)
    doc = json.loads(ok.stdout) if fmt == "json" else yaml.safe_load(ok.stdout)
    assert ok.returncode == 0 and doc["valid"] is True and doc["experiment"]["metadata"]["name"] == "quickstart-cpu"
    check(doc, "validate.schema.json")
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUICKSTART.read_text().replace("samples: 10", "samples: 1"))
    proc = spx("validate", str(bad), "-o", fmt)
    doc = json.loads(proc.stdout) if fmt == "json" else yaml.safe_load(proc.stdout)
    assert proc.returncode == 3 and doc["valid"] is False and "spec.kernel.samples" in doc["problems"][0]
    check(doc, "validate.schema.json")


def test_report(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(kernel_result().model_dump_json(by_alias=True))
    proc = spx("report", str(tmp_path), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    check(doc, "report.schema.json")
    assert doc["verdict"] == "Pass" and doc["partial"] is False and doc["kernel"]["recommendedThresholdTokens"] == 128
    check(yaml.safe_load(spx("report", str(tmp_path), "-o", "yaml").stdout), "report.schema.json")


def test_predict() -> None:
    proc = spx("predict", "-o", "json")
    doc = json.loads(proc.stdout)
    check(doc, "predict.schema.json")
    assert doc["prediction"]["recommendedThresholdTokens"] == 2048
    assert 1400 < doc["prediction"]["breakEvenTokens"] < 1500  # the seed author's ~1450, linear


def test_gate(tmp_path: Path) -> None:
    from spx.analysis import judge
    from spx.runner.experiment import build_status

    result = kernel_result()
    (tmp_path / "status.json").write_text(build_status(result, judge(result, result.spec)).model_dump_json(by_alias=True))
    for fmt in ("json", "yaml"):
        proc = spx("gate", str(tmp_path), "-o", fmt)
        doc = json.loads(proc.stdout) if fmt == "json" else yaml.safe_load(proc.stdout)
        check(doc, "gate.schema.json")
        assert proc.returncode == doc["exitCode"] == 0 and doc["verdict"] == "Pass"


def test_bash_completion_script() -> None:
    proc = spx("completion", "bash")
    assert proc.returncode == 0
    script = proc.stdout
    for cmd in ("run", "validate", "report", "predict", "gate", "completion"):
        assert cmd in script
    assert "--output" in script and "--device" in script
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=script, text=True, timeout=30).returncode == 0
        # loading it defines the completion function for `spx`
        probe = subprocess.run(["bash", "-c", f"{script}\ncomplete -p spx"], capture_output=True, text=True, timeout=30)
        assert probe.returncode == 0 and "spx" in probe.stdout


def test_zsh_completion_script() -> None:
    proc = spx("completion", "zsh")
    assert proc.returncode == 0 and proc.stdout.startswith("#compdef spx")
