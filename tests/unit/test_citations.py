"""Nothing in the repository cites what is not in it: code, tests, docs, scripts, the chart and the
published schemas (``crds/``, ``docs/schemas/``) are scanned for

1. files that never were in the repository (the founding notes: ``DESIGN.md``, ``NOTES.md``,
   ``STYLE.md``, anything under ``../shared/``);
2. paths into this repository's own folders (``docs/…``, ``tests/…``, ``operator/…``, …) that do not
   exist — a moved or deleted file still cited (``docs/testing.md``, ``tests/integration/emulator.py``);
3. bare ``*.md`` names that are no file of the repository;
4. dotted ``spx.…`` names that name no module, nor anything a module defines (``spx.runner.kubernetes``).

Paths of other projects are fine when the line says whose they are ("vLLM's ``tests/…``").
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OPERATOR = REPO / "operator"

#: Never part of the repository (the notes the project started from).
OUTSIDE = re.compile(r"\b(?:DESIGN|NOTES|STYLE)\.md\b|\.\./shared/|/work/shared")
#: Folders of this repository a path may start with.
OWN_ROOTS = ("operator/", "tests/", "docs/", "benchmarks/", "scripts/", "charts/", "crds/", "examples/", "images/")
PATH = re.compile(r"(?<![\w./@:-])((?:\.\./)*[\w.-]+(?:/[\w.-]+)*\.(?:py|md|ya?ml|json|sh|csv|toml|txt|tpl))(?![\w/])")
#: A path right after one of these is another project's ("vLLM's ``tests/quantization/test_fp8.py``").
FOREIGN = re.compile(r"(?:vLLM|vllm|kopf|humming|nccl-tests|NVIDIA/nccl-tests|Megatron-LM)(?:'s)?(?: own)?\s*`*$")
DOTTED = re.compile(r"(?<![\w./-])spx(?:\.[A-Za-z_]\w*)+")
#: ``spx.<this>`` is a domain or a file name, not a module (``spx.dev/…``, ``spx.json``).
NOT_MODULES = ("dev", "json", "yaml", "yml", "md", "png", "csv", "txt", "io")
#: Scanned files: everything tracked but data, recorded outputs and images.
SKIP = ("examples/results/", "tests/data/", "tests/chart/data/", ".ci/")
#: Files whose job is to name the forbidden files (the checks themselves).
CHECKS = ("tests/unit/test_citations.py", "tests/integration/test_crd_real.py")


@functools.cache
def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    return [f for f in out.splitlines() if (REPO / f).is_file()]


def scanned() -> list[str]:
    return [f for f in tracked() if not f.startswith(SKIP) and f not in CHECKS
            and not f.endswith((".png", ".csv", ".log", ".tgz"))]


def _exists(cited: str, where: Path) -> bool:
    if "/" not in cited:  # a bare name: any file of the repository by that name
        return any(Path(f).name == cited for f in tracked())
    return (REPO / cited).exists() or (where.parent / cited).exists()


@functools.cache
def _defined(module_file: Path) -> frozenset[str]:
    """Top-level names a module defines or imports (what ``spx.mod.NAME`` may name)."""
    names: set[str] = set()
    for node in ast.parse(module_file.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            names.update(_defined_in(node))
    return frozenset(names)


def _defined_in(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in child.names)
        elif isinstance(child, ast.FunctionDef | ast.ClassDef):
            names.add(child.name)
        elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
    return names


def dotted_problem(name: str) -> str | None:
    """Why ``spx.a.b.c`` names nothing, or None: the longest module prefix must exist and the next part
    must be a submodule or a top-level name of that module (attributes of classes are not checked)."""
    parts = name.split(".")
    path = OPERATOR
    for i, part in enumerate(parts):
        if (path / part).is_dir() and (path / part / "__init__.py").exists():
            path = path / part
            continue
        if (path / f"{part}.py").exists():
            path = path / f"{part}.py"
            if i + 1 < len(parts) and parts[i + 1] not in _defined(path):
                return f"{'.'.join(parts[:i + 1])} defines no {parts[i + 1]}"
            return None
        init = path / "__init__.py"
        if path.is_dir() and init.exists() and part in _defined(init):
            return None
        if path.is_dir() and (path / part).exists():  # a data folder, e.g. spx.data
            return None
        return f"no module {'.'.join(parts[:i + 1])}"
    return None


def problems_in(rel: str, text: str | None = None) -> list[str]:
    """The dead citations of the file ``rel`` (or of ``text`` as if it were that file), one line each."""
    path = REPO / rel
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            return []
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{number}"
        for m in OUTSIDE.finditer(line):
            found.append(f"{where}: cites {m.group(0)!r}, which is not in the repository")
        for m in PATH.finditer(line):
            cited = m.group(1)
            if re.search(r"https?://\S*$", line[:m.start()]) or FOREIGN.search(line[:m.start()]):
                continue
            own = cited.startswith(OWN_ROOTS) or cited.startswith("../") or ("/" not in cited and cited.endswith(".md"))
            if own and not _exists(cited, path) and not OUTSIDE.search(cited):
                found.append(f"{where}: cites {cited!r}, no such file in the repository")
        for m in DOTTED.finditer(line):
            name = m.group(0).rstrip(".")
            why = None if name.split(".")[1] in NOT_MODULES else dotted_problem(name)
            if why and not (line[m.end():m.end() + 1] == "*" or name.endswith(("_", "__"))):
                found.append(f"{where}: cites {name!r}: {why}")
    return found


def test_the_scanned_set_covers_code_docs_and_published_schemas() -> None:
    files = set(scanned())
    assert {"crds/shardedprojectionexperiments.yaml", "docs/schemas/gate.schema.json", "README.md",
            "operator/spx/api/spec.py", "docs/operator.md", "scripts/setup_vllm.sh"} <= files


def test_nothing_cites_a_file_that_is_not_in_the_repository() -> None:
    problems = [p for rel in scanned() for p in problems_in(rel)]
    assert not problems, "\n".join(problems[:40]) + (f"\n… and {len(problems) - 40} more" if len(problems) > 40 else "")


@pytest.mark.parametrize(("line", "expected"), [
    ("see DESIGN.md", "cites 'DESIGN.md'"),
    ("the table (``../shared/data/h20.csv``)", "cites '../shared/'"),
    ("as docs/testing.md describes", "cites 'docs/testing.md', no such file"),
    ("(`tests/integration/emulator.py`, on kmock)", "cites 'tests/integration/emulator.py', no such file"),
    ("the Job (spx.runner.kubernetes.build_job)", "cites 'spx.runner.kubernetes.build_job': no module spx.runner.kubernetes"),
    ("the builder spx.controller.manifests.job.nope", "spx.controller.manifests.job defines no nope"),
])
def test_the_scan_finds_each_kind_of_dead_citation(line: str, expected: str) -> None:
    found = problems_in("docs/probe.md", line)
    assert any(expected in p for p in found), found


@pytest.mark.parametrize("line", [
    "vLLM's ``tests/quantization/test_fp8.py`` attaches one",
    "see [the method](kernel-benchmark.md#method) and docs/seed.md",
    "spx.controller.manifests.job.build_job and spx.vocabulary.VERDICTS, spx.data",
    "https://github.com/iterative/shtab/blob/main/docs/use.md",
])
def test_the_scan_leaves_real_citations_alone(line: str) -> None:
    assert problems_in("docs/probe.md", line) == []
