"""Numbers YAML 1.1 reads otherwise than they look (``016`` is octal 14, ``17:04`` is base-60 1024, ``1e3`` is text):
an experiment with one is refused, naming the field, its line and column and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from spx.api import SpecError, load_experiment
from spx.api.exit_codes import EXIT_USAGE
from spx.cli import main

QUICKSTART = (Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml").read_text()


def experiment(tokens: str = "[8, 32, 128, 512, 2048]", hidden: str = "1024") -> str:
    """The quickstart experiment with its ``sweep.tokens`` and ``projection.hiddenSize`` written as given."""
    text = QUICKSTART.replace("tokens: [8, 32, 128, 512, 2048]", f"tokens: {tokens}")
    return text.replace("hiddenSize: 1024", f"hiddenSize: {hidden}")


def problems(text: str) -> list[str]:
    """The problems ``load_experiment`` raises for ``text`` (none: it loads)."""
    try:
        load_experiment(text, source="exp.yaml")
    except SpecError as err:
        return list(err.problems)
    return []


@pytest.mark.parametrize(("tokens", "hidden", "expected"), [
    ("[016, 032, 064]", "1024", [
        "spec.sweep.tokens[0] (line 23, column 14): write 16, not 016: YAML 1.1 reads a leading 0 as octal (016 is 14); "
        "quote it if it is text",
        "spec.sweep.tokens[1] (line 23, column 19): write 32, not 032: YAML 1.1 reads a leading 0 as octal (032 is 26); "
        "quote it if it is text",
        "spec.sweep.tokens[2] (line 23, column 24): write 64, not 064: YAML 1.1 reads a leading 0 as octal (064 is 52); "
        "quote it if it is text"]),
    ("[8, 32]", "02000", [
        "spec.projection.hiddenSize (line 16, column 17): write 2000, not 02000: YAML 1.1 reads a leading 0 as octal "
        "(02000 is 1024); quote it if it is text"]),
    ("[08, 32]", "1024", [  # not octal to YAML 1.1 either: a string, as confusing
        "spec.sweep.tokens[0] (line 23, column 14): write 8, not 08: YAML 1.1 reads a leading 0 as octal; quote it if "
        "it is text"]),
    ("[8, 32]", "17:04", [
        "spec.projection.hiddenSize (line 16, column 17): write 1024, not 17:04: YAML 1.1 reads digits with colons as "
        "base 60; quote it if it is text"]),
    ("[8, 32]", "1e3", ["spec.projection.hiddenSize: must be a whole number: write 1000 (YAML reads 1e3 as text) "
                        "(got '1e3')"]),
], ids=["octal tokens", "octal hiddenSize", "08", "sexagesimal", "1e3"])
def test_numbers_yaml_reads_otherwise_are_refused(tokens: str, hidden: str, expected: list[str]) -> None:
    assert problems(experiment(tokens, hidden)) == expected


def test_plain_numbers_zero_and_quoted_text_still_load() -> None:
    assert problems(experiment("[8, 32]", "1024")) == []
    exp = load_experiment(experiment("[8, 32]").replace("warmup: 2", "warmup: 0"), source="exp.yaml")
    assert (exp.spec.sweep.tokens, exp.spec.kernel.warmup) == ([8, 32], 0)
    assert problems(experiment().replace("name: quickstart-cpu", "name: '0123'")) == []


def test_validate_names_the_octal_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(experiment("[016, 32]"))
    assert main(["validate", str(path)]) == EXIT_USAGE
    assert "spec.sweep.tokens[0] (line 23, column 14): write 16, not 016" in capsys.readouterr().err
