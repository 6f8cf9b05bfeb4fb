"""spx.vocabulary: each vocabulary is defined once, and every place that shows or uses it (the
models, the CRD's descriptions, ``spx run --help``, the metrics' label values, the gate, the docs'
tables, the plugin and the serving runner) agrees with it."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, get_args

import pytest

from spx import vocabulary
from spx.api import conditions
from spx.api.crd import build_crd
from spx.api.kernel import KernelSpec
from spx.api.status import Condition, ExperimentStatus
from spx.vocabulary import (
    DECIDED_REASONS,
    GATHER_BACKEND_MEANINGS,
    GATHER_BACKENDS,
    GEMM_BACKEND_MEANINGS,
    GEMM_BACKENDS,
    PHASES,
    TERMINAL_PHASES,
    VERDICTS,
    WAITING_PHASES,
    one_of,
)

REPO = Path(__file__).resolve().parents[2]
SPX = REPO / "operator" / "spx"


def _kernel_schema() -> dict[str, Any]:
    version = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return version["properties"]["spec"]["properties"]["kernel"]["properties"]


def test_the_tuples_are_the_literal_types_values() -> None:
    assert VERDICTS == ("Pass", "Fail", "Inconclusive")
    assert DECIDED_REASONS == ("Pass", "Fail", "Inconclusive", "InvalidSpec", "BenchmarkFailed", "InfraFailed")
    assert PHASES == ("Pending", "Queued", "Running", "Analyzing", "Succeeded", "Failed")
    assert TERMINAL_PHASES == ("Succeeded", "Failed") and WAITING_PHASES + TERMINAL_PHASES == PHASES
    assert GEMM_BACKENDS == ("auto", "humming", "marlin", "torch-bf16", "torch-fp8", "vllm")
    assert GATHER_BACKENDS == ("auto", "nccl", "gloo", "vllm", "modelled")
    assert get_args(vocabulary.DecidedReason) == DECIDED_REASONS and get_args(vocabulary.Phase) == PHASES
    assert set(GEMM_BACKEND_MEANINGS) == set(GEMM_BACKENDS) and set(GATHER_BACKEND_MEANINGS) == set(GATHER_BACKENDS)


def test_the_models_accept_exactly_the_vocabulary() -> None:
    assert get_args(ExperimentStatus.model_fields["phase"].annotation) == PHASES
    assert get_args(KernelSpec.model_fields["gemm_backend"].annotation) == GEMM_BACKENDS
    assert get_args(KernelSpec.model_fields["gather"].annotation) == GATHER_BACKENDS
    assert conditions.DECIDED_REASONS == set(DECIDED_REASONS)
    assert conditions.VERDICT_REASONS == set(VERDICTS)
    assert conditions.WAITING_REASONS == set(WAITING_PHASES)
    assert conditions.TERMINAL_PHASES == set(TERMINAL_PHASES)


def test_kubectl_explain_lists_every_backend() -> None:
    """``kubectl explain …spec.kernel.gemmBackend`` prints the CRD's description: every backend is in it."""
    kernel = _kernel_schema()
    for field, values in (("gemmBackend", GEMM_BACKENDS), ("gather", GATHER_BACKENDS)):
        assert tuple(kernel[field]["enum"]) == values
        described = re.findall(r"(?:^|, | or |: )([a-z0-9-]+) \(", kernel[field]["description"])
        assert tuple(described) == values, kernel[field]["description"]
    assert "humming" in kernel["gemmBackend"]["description"] and "marlin" in kernel["gemmBackend"]["description"]


def test_status_descriptions_list_the_vocabulary() -> None:
    assert ExperimentStatus.model_fields["phase"].description == (
        "Pending, Queued, Running, Analyzing, Succeeded or Failed.")
    assert ExperimentStatus.model_fields["verdict"].description == (
        "Pass, Fail or Inconclusive; set only when Decided is True with one of those reasons.")
    assert Condition.model_fields["reason"].description == (
        "CamelCase reason (for Decided: Pass, Fail, Inconclusive, InvalidSpec, BenchmarkFailed or InfraFailed).")


def test_spx_run_help_lists_every_gemm_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from spx.cli import main

    assert main(["run", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"override spec.kernel.gemmBackend ({', '.join(GEMM_BACKENDS[:-1])} or vllm)" in text


def test_the_docs_table_names_every_backend() -> None:
    """docs/kernel-benchmark.md's method table: its "GEMM backends" row names every backend but ``auto``
    (described in the paragraph above it)."""
    rows = {line.split("|")[1].strip(): line for line in (REPO / "docs" / "kernel-benchmark.md").read_text().splitlines()
            if line.startswith("| ")}
    for backend in GEMM_BACKENDS[1:]:
        assert f"`{backend}`" in rows["GEMM backends"], backend


def test_metric_label_values_and_the_gate_cover_the_vocabulary() -> None:
    from spx.cli.gate import EXIT_BY_VERDICT
    from spx.cli.tables import VERDICT_STYLE
    from spx.controller import metrics

    assert metrics.PHASES == PHASES and metrics.VERDICTS == VERDICTS
    assert tuple(EXIT_BY_VERDICT) == VERDICTS and tuple(VERDICT_STYLE) == VERDICTS


def test_the_plugin_and_the_serving_runner_use_the_same_names() -> None:
    from spx.bench import vllm_plugin
    from spx.serving import ab, commands

    assert vllm_plugin.ENV_THRESHOLD == commands.ENV_THRESHOLD == vocabulary.PLUGIN_ENV_THRESHOLD
    assert vllm_plugin.LOG_MARKER == ab.PLUGIN_LOG_MARKER == vocabulary.PLUGIN_LOG_MARKER
    assert vllm_plugin.ENTRY_POINT_NAME == commands.PLUGIN_NAME == vocabulary.PLUGIN_ENTRY_POINT_NAME
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'{vocabulary.PLUGIN_ENTRY_POINT_NAME} = "{vllm_plugin.__name__}:register"' in pyproject
    rules = [r["rule"] for node in _nodes(build_crd()) for r in node.get("x-kubernetes-validations", [])
             if "SPX_ARM" in r["rule"]]
    assert rules == [" && ".join(f"!('{k}' in self)" for k in vocabulary.RESERVED_SERVER_ENV)]


def _nodes(tree: Any) -> list[dict[str, Any]]:
    """Every mapping in ``tree``, depth first."""
    if isinstance(tree, dict):
        return [tree] + [n for v in tree.values() for n in _nodes(v)]
    if isinstance(tree, list):
        return [n for v in tree for n in _nodes(v)]
    return []


def test_one_of() -> None:
    assert one_of(("a",)) == "a"
    assert one_of(("a", "b", "c")) == "a, b or c"
    assert one_of(("a", "b"), {"a": "first", "b": "second"}) == "a (first) or b (second)"
    with pytest.raises(ValueError, match=r"meanings \['a'\] do not match the values \['a', 'b'\]"):
        one_of(("a", "b"), {"a": "first"})


#: Literals that spell a vocabulary's values but are another vocabulary: (file, values).
_OTHER_VOCABULARIES = {
    ("controller/decide/objects.py", frozenset(TERMINAL_PHASES)),  # Kubernetes pod phases share the two names
}


def _string_collections(tree: ast.AST) -> list[tuple[int, frozenset[str]]]:
    """Tuples, lists and sets of string literals, and ``Literal[...]`` subscripts, with their line."""
    found = []
    for node in ast.walk(tree):
        elts: list[ast.expr] | None = None
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            elts = list(node.elts)
        elif isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
            elts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if elts and len(elts) > 1 and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts):
            found.append((node.lineno, frozenset(e.value for e in elts)))  # type: ignore[attr-defined]
    return found


def test_no_module_spells_a_vocabulary_out_again() -> None:
    """A tuple, list, set or Literal with exactly the values of a vocabulary, outside spx.vocabulary, is
    a second definition that can drift (as the gemmBackend help once did): derive it instead."""
    vocabularies = {frozenset(v): name for name, v in (
        ("VERDICTS", VERDICTS), ("DECIDED_REASONS", DECIDED_REASONS), ("PHASES", PHASES),
        ("WAITING_PHASES", WAITING_PHASES), ("TERMINAL_PHASES", TERMINAL_PHASES),
        ("FAILURE_REASONS", vocabulary.FAILURE_REASONS), ("GEMM_BACKENDS", GEMM_BACKENDS),
        ("GATHER_BACKENDS", GATHER_BACKENDS), ("RESERVED_SERVER_ENV", vocabulary.RESERVED_SERVER_ENV))}
    copies = []
    for path in sorted(SPX.rglob("*.py")):
        rel = path.relative_to(SPX).as_posix()
        if rel == "vocabulary.py":
            continue
        for line, values in _string_collections(ast.parse(path.read_text(encoding="utf-8"))):
            if values in vocabularies and (rel, values) not in _OTHER_VOCABULARIES:
                copies.append(f"operator/spx/{rel}:{line} spells out {vocabularies[values]}")
    assert not copies, "\n".join(copies)


def _table_rows(doc: str) -> dict[str, str]:
    """``first cell → whole row`` of every Markdown table row in ``docs/<doc>``."""
    lines = (REPO / "docs" / doc).read_text(encoding="utf-8").splitlines()
    return {line.split("|")[1].strip(): line for line in lines if line.startswith("| ")}


def test_the_status_docs_list_every_phase_and_reason() -> None:
    """docs/operator.md's phase and condition tables, docs/metrics.md's spx_verdict row and docs/cli.md's
    exit-code table name the whole vocabulary."""
    operator_doc = _table_rows("operator.md")
    assert all(f"`{phase}`" in operator_doc for phase in PHASES)
    assert all(f"`{v}`" in operator_doc["`Succeeded`"] for v in VERDICTS)
    assert all(f"`{r}`" in operator_doc["`Failed`"] for r in vocabulary.FAILURE_REASONS)
    assert all(f"`{r}`" in operator_doc["`Decided`"] for r in DECIDED_REASONS + WAITING_PHASES)
    assert all(v in _table_rows("metrics.md")["`spx_verdict`"] for v in VERDICTS)
    assert all(r in _table_rows("cli.md")["2"] for r in vocabulary.FAILURE_REASONS)


def test_the_plugin_loads_without_spx_api() -> None:
    """vLLM loads the plugin in every process it starts: it imports the vocabulary, never spx.api's models."""
    import subprocess
    import sys

    code = ("import sys, spx.bench.vllm_plugin; "
            "sys.exit(1 if 'spx.api' in sys.modules or 'pydantic' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
