"""spx.vocabulary: each vocabulary is defined once, and every place that shows or uses it (the
models, the CRD's descriptions, ``spx run --help``, the metrics' label values, the gate, the docs'
tables, the plugin and the serving runner) agrees with it."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path
from typing import Any, get_args

import pytest

from spx import vocabulary
from spx.api import conditions
from spx.api import step as api_step
from spx.api.crd import build_crd
from spx.api.kernel import KernelSpec
from spx.api.projection import ProjectionSpec
from spx.api.result import KernelResult, PointResult
from spx.api.status import Condition, ExperimentStatus, KernelPoint
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
    # reasons may be added (the GitOps checks fail closed on a new one), never removed: pipelines wait on these
    assert DECIDED_REASONS[:3] == VERDICTS and {"InvalidSpec", "BenchmarkFailed", "InfraFailed"} <= set(DECIDED_REASONS)
    assert vocabulary.COMPLETED_REASONS == vocabulary.INFRA_REASONS + vocabulary.BENCH_REASONS + (
        "JobSucceeded", "BenchmarkCompleted", "NotRun")
    assert set(vocabulary.COMPLETED_REASON_MEANINGS) == set(vocabulary.COMPLETED_REASONS)
    assert get_args(vocabulary.ConditionType) == vocabulary.CONDITION_TYPES
    assert PHASES == ("Pending", "Queued", "Running", "Analyzing", "Succeeded", "Failed")
    assert TERMINAL_PHASES == ("Succeeded", "Failed") and WAITING_PHASES + TERMINAL_PHASES == PHASES
    # the backends themselves are the registry's (tests/unit/test_gemm_registry.py); auto comes first
    assert GEMM_BACKENDS[0] == "auto" and GEMM_BACKENDS[1:] == get_args(vocabulary.ResolvedGemmBackend)
    assert GATHER_BACKENDS == ("auto", "nccl", "gloo", "vllm", "modelled")
    assert get_args(vocabulary.DecidedReason) == DECIDED_REASONS and get_args(vocabulary.Phase) == PHASES
    assert set(GEMM_BACKEND_MEANINGS) == set(GEMM_BACKENDS) and set(GATHER_BACKEND_MEANINGS) == set(GATHER_BACKENDS)
    # the step A/B's vocabularies (spx.api.step re-exports them; its models' fields are typed with them)
    assert vocabulary.STEP_ARMS == vocabulary.MEASURED_CANDIDATES + ("aa", "positive-control")
    assert vocabulary.STEP_REGIMES == vocabulary.KERNEL_REGIMES + ("between", "undetermined")
    assert vocabulary.STEP_OUTCOMES == ("gain", "loss", "indifferent") and vocabulary.STEP_STATISTICS == ("median", "mean")
    for name in ("StepArm", "StepRegime", "StepOutcome", "StepStatistic"):
        assert getattr(api_step, name) is getattr(vocabulary, name), name


def test_the_models_accept_exactly_the_vocabulary() -> None:
    assert get_args(ExperimentStatus.model_fields["phase"].annotation) == PHASES
    assert get_args(KernelSpec.model_fields["gemm_backend"].annotation) == GEMM_BACKENDS
    assert get_args(KernelSpec.model_fields["gather"].annotation) == GATHER_BACKENDS
    assert conditions.DECIDED_REASONS == set(DECIDED_REASONS)
    for model, field, vocab in (
            (KernelSpec, "timer", vocabulary.TIMERS), (KernelSpec, "device", vocabulary.DEVICES),
            (KernelSpec, "execution", vocabulary.EXECUTIONS), (ProjectionSpec, "weight_format", vocabulary.WEIGHT_FORMATS),
            # a partial result whose ranks died before resolving them keeps the spec's "auto"
            (KernelResult, "timer", vocabulary.TIMERS),
            (KernelResult, "gemm_backend", vocabulary.GEMM_BACKENDS),
            (KernelResult, "gather_backend", vocabulary.RESOLVED_GATHER_BACKENDS + ("auto",)),
            (KernelResult, "device", get_args(vocabulary.ResolvedDevice)),
            (KernelResult, "execution", vocabulary.EXECUTIONS + (type(None),)),
            (PointResult, "execution", vocabulary.EXECUTION_MODES + (type(None),)),
            (KernelPoint, "execution", vocabulary.EXECUTION_MODES + (type(None),)),
            (PointResult, "gather_source", vocabulary.GATHER_SOURCES)):
        annotation = model.model_fields[field].annotation
        flat = tuple(a for arg in get_args(annotation) for a in (get_args(arg) or (arg,)))
        assert flat == vocab, (model.__name__, field, flat)
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
    description = Condition.model_fields["reason"].description or ""
    assert description.startswith("CamelCase reason (for Decided: ") and all(r in description for r in DECIDED_REASONS)


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


def test_the_kernel_docs_name_every_weight_format_and_execution() -> None:
    """docs/kernel-benchmark.md: its weight-format table has a row per format, its method table's execution row
    names every ``kernel.execution``."""
    rows = _table_rows("kernel-benchmark.md")
    assert [f for f in vocabulary.WEIGHT_FORMATS if any(k.startswith(f"`{f}`") for k in rows)] == list(
        vocabulary.WEIGHT_FORMATS)
    assert all(f"`{mode}`" in rows["execution"] for mode in vocabulary.EXECUTIONS)


def test_metric_label_values_and_the_gate_cover_the_vocabulary() -> None:
    from spx.cli.gate import EXIT_BY_VERDICT
    from spx.cli.tables import VERDICT_STYLE
    from spx.controller import metrics

    assert metrics.PHASES == PHASES and metrics.VERDICTS == VERDICTS
    assert tuple(EXIT_BY_VERDICT) == VERDICTS and tuple(VERDICT_STYLE) == VERDICTS


def test_the_plugin_and_the_serving_runner_use_the_same_names() -> None:
    from spx.serving import ab, commands
    from spx.vllm_ext import plugin as vllm_plugin

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


def _vocabularies() -> dict[frozenset[str], str]:
    """Every vocabulary spx.vocabulary defines, found, not listed: each ``Literal`` type's values and each
    tuple of strings (values → the first name that defines them)."""
    found: dict[frozenset[str], str] = {}
    for name, value in vars(vocabulary).items():
        if typing.get_origin(value) is typing.Literal:
            values = typing.get_args(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
            values = value
        else:
            continue
        if len(set(values)) > 1 and not name.startswith("_"):
            found.setdefault(frozenset(values), name)
    return found


def _named_constants() -> dict[str, str]:
    """spx.vocabulary's named strings (file names, weight formats, environment variables): value → name.
    A plain lowercase word (``serving``, ``logs``) is left out: it is also a command, a key or prose."""
    return {value: name for name, value in vars(vocabulary).items()
            if name.isupper() and isinstance(value, str) and not re.fullmatch(r"[a-z]+", value)}


def _string_collections(tree: ast.AST) -> list[tuple[int, frozenset[str], bool]]:
    """Tuples, lists and sets of string literals, and ``Literal[...]`` subscripts: (line, values, is a Literal)."""
    found = []
    for node in ast.walk(tree):
        elts: list[ast.expr] | None = None
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            elts = list(node.elts)
        elif isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
            elts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if elts and len(elts) > 1 and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts):
            found.append((node.lineno, frozenset(e.value for e in elts),  # type: ignore[attr-defined]
                          isinstance(node, ast.Subscript)))
    return found


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String literals in code: not docstrings or other bare string statements, not the text of f-strings."""
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    prose |= {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose]


def test_no_module_spells_a_vocabulary_out_again() -> None:
    """Every vocabulary of spx.vocabulary (found by introspection: nothing to add here when one is added)
    is written once. Outside spx.vocabulary, none of these exists in operator/spx:

    - a tuple, list, set or ``Literal`` with exactly a vocabulary's values (a second definition that can
      drift, as the gemmBackend help once did): derive it or import the type;
    - a ``Literal`` of part of a vocabulary (a sub-vocabulary: define it in spx.vocabulary);
    - a named constant's value written out (a run directory's file name, the MXFP8 format string, the
      plugin's environment variables): import the name.
    """
    vocabularies, constants = _vocabularies(), _named_constants()
    copies = []
    for path in sorted(SPX.rglob("*.py")):
        rel = path.relative_to(SPX).as_posix()
        if rel == "vocabulary.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, values, is_literal in _string_collections(tree):
            if (rel, values) in _OTHER_VOCABULARIES:
                continue
            if values in vocabularies:
                copies.append(f"operator/spx/{rel}:{line} spells out {vocabularies[values]}")
            elif is_literal:
                copies += [f"operator/spx/{rel}:{line} Literal of part of {name}: define it in spx.vocabulary"
                           for vocab, name in vocabularies.items() if values < vocab][:1]
        copies += [f"operator/spx/{rel}:{line} writes {value!r}: use spx.vocabulary.{constants[value]}"
                   for line, value in _code_strings(tree) if value in constants]
    assert len(vocabularies) >= 30 and "RESULT_FILE" in constants.values() and "MXFP8" in constants.values()
    assert not copies, "\n".join(copies)


def test_the_scan_finds_each_kind_of_copy() -> None:
    """The scan above is not vacuous: it flags a copied list, a sub-vocabulary Literal and a file name."""
    tree = ast.parse(
        'X = ("graph", "eager")\nY = Literal["cupti", "host"]\nopen("status.json")\n"""result.json"""\nf"{a}result.json"\n')
    vocabularies = _vocabularies()
    collections = _string_collections(tree)
    assert vocabularies[collections[0][1]] == "ExecutionMode"
    assert collections[1][2] and collections[1][1] < next(v for v, n in vocabularies.items() if n == "ResolvedTimer")
    assert [value for _, value in _code_strings(tree) if value in _named_constants()] == ["status.json"]


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
    assert all(f"`{r}`" in operator_doc["`Completed`"] for r in vocabulary.COMPLETED_REASONS)
    assert all(v in _table_rows("metrics.md")["`spx_verdict`"] for v in VERDICTS)
    assert all(r in _table_rows("cli.md")["2"] for r in vocabulary.FAILURE_REASONS)


def test_the_plugin_loads_without_spx_api() -> None:
    """vLLM loads the plugin in every process it starts: it imports the vocabulary, never spx.api's models."""
    import subprocess
    import sys

    code = ("import sys, spx.vllm_ext.plugin; "
            "sys.exit(1 if 'spx.api' in sys.modules or 'pydantic' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
