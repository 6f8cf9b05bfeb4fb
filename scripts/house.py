"""The shape of the spx package, in five figures (issues 21's and 31's "house before and after").

    .venv/bin/python scripts/house.py                 # this checkout's operator/spx
    .venv/bin/python scripts/house.py --package spx.cli   # the rooms of another package (default spx.controller)
    .venv/bin/python scripts/house.py --trace         # also trace `spx run examples/quickstart.yaml` (CPU, ~1 min)
    PYTHONPATH=OTHER/operator .venv/bin/python scripts/house.py --repo OTHER --trace   # another checkout

1. **largest modules**: lines of each ``operator/spx/**.py``, the three longest.
2. **import circles**: strongly connected components (Tarjan) of the module import graph that grimp
   (import-linter's graph builder) reads from the source, function-level imports included; and the
   imports that run up the layers (ranks below).
3. **modules outside the contracts**: modules of spx (not the root package) that no import-linter
   contract in ``pyproject.toml`` names (themselves or a package above them), and those outside the
   ``layers`` contract.
4. **the longest call trail of an experiment from ``spx run``** (``--trace``): ``spx run`` on the CPU
   quickstart in this process under ``sys.setprofile``; each call into spx code is recorded with the spx
   frames above it (calls made through other libraries, e.g. pydantic validators or rich renderables,
   count as a step). The trail is the stack that hops between modules most often: its hops, depth, the
   modules it crosses and its *climbs*: steps from a module to one in a higher layer (cli > controller >
   runner > serving > bench > analysis > api > vocabulary, read from the ``layers`` contract; the former
   top-level modules ranked where issue 21 moved them). Only the ``spx run`` process is traced, not its rank
   processes. CPU timing plays no part in these figures.
5. **the rooms of one package** (``--package``, default ``spx.controller``): its rooms (its direct modules and
   sub-packages, a sub-package counted as one room; ``__init__`` not counted), the import arrows between them
   (distinct room → room pairs, from grimp's graph), its floors (rooms on the longest arrow path, circles
   condensed first), its largest module and its longest function (lines of the ``def`` through its last
   line, from :mod:`ast`); and the longest function of all of spx.

The layer ranks come from the import contract (``[tool.importlinter]``'s ``layers`` contract in
``pyproject.toml``), so the script and ``lint-imports`` agree on the order.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Top-level modules before issue 21, ranked as the layer they moved into (report/plot/gate → cli,
#: metrics → controller, vllm_plugin → bench, exit_codes → api).
FORMER = {"report": "cli", "plot": "cli", "gate": "cli", "metrics": "controller", "vllm_plugin": "bench",
          "exit_codes": "api"}


def layer_ranks(pyproject: Path) -> dict[str, int]:
    """Layer rank of each package (higher = nearer the user), from the ``layers`` contract of ``pyproject``.

    A layer entry ``"a | b"`` (independent siblings) or ``"a : b"`` ranks each name alike. Raises
    ``SystemExit`` naming the file when it holds no ``layers`` contract over ``spx``."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    layers = next((c["layers"] for c in contracts if c["type"] == "layers" and not c.get("containers")), None)
    if layers is None:
        raise SystemExit(f"{pyproject}: no top-level `layers` contract in [tool.importlinter] to rank the layers by")
    ranks: dict[str, int] = {}
    for i, entry in enumerate(layers):
        for name in entry.replace(":", "|").split("|"):
            ranks[name.strip(" ()")] = len(layers) - 1 - i
    ranks.update({f"spx.{name}": ranks[f"spx.{layer}"] for name, layer in FORMER.items() if f"spx.{layer}" in ranks})
    return ranks


#: Layer rank of each package (higher = nearer the user); :func:`main` fills it from the import contract.
RANK: dict[str, int] = {}


def rank(module: str) -> int | None:
    """The layer rank of ``module`` (:data:`RANK` of it or the package above it), None for the root."""
    parts = module.split(".")
    for i in range(len(parts), 1, -1):
        if ".".join(parts[:i]) in RANK:
            return RANK[".".join(parts[:i])]
    return None


def largest(package_dir: Path, n: int = 3) -> list[tuple[str, int]]:
    """The ``n`` longest modules as (path relative to the package's parent, lines)."""
    sizes = [(p.relative_to(package_dir.parent).as_posix(), len(p.read_text(encoding="utf-8").splitlines()))
             for p in package_dir.rglob("*.py")]
    return sorted(sizes, key=lambda s: -s[1])[:n]


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Imports from a module into a higher layer's (:data:`RANK`), ``"a -> b"``."""
    ups = []
    for a, targets in edges.items():
        for b in targets:
            ra, rb = rank(a), rank(b)
            if ra is not None and rb is not None and rb > ra:
                ups.append(f"{a} -> {b}")
    return sorted(ups)


def import_graph() -> dict[str, set[str]]:
    """spx's module import graph (grimp), internal imports only."""
    import grimp

    graph = grimp.build_graph("spx")
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def room_of(module: str, package: str) -> str | None:
    """The room of ``package`` that holds ``module`` (its direct child), None outside it or for the package."""
    if not module.startswith(package + "."):
        return None
    return package + "." + module[len(package) + 1:].split(".")[0]


def floors(arrows: dict[str, set[str]]) -> int:
    """Rooms on the longest path of ``arrows`` (an importer → imported graph), circles condensed to one room."""
    component = {m: m for m in arrows}
    for group in circles(arrows):
        for m in group:
            component[m] = group[0]
    dag: dict[str, set[str]] = {}
    for a, targets in arrows.items():
        dag.setdefault(component[a], set()).update(component.get(b, b) for b in targets if component.get(b, b) != component[a])
    depth: dict[str, int] = {}

    def height(node: str) -> int:  # recursion depth ≤ rooms, a few dozen
        if node not in depth:
            depth[node] = 1 + max((height(b) for b in dag.get(node, ())), default=0)
        return depth[node]

    return max((height(n) for n in dag), default=0)


def function_lengths(root: Path, files: Iterable[Path]) -> list[tuple[str, int]]:
    """(``module:qualified.name``, lines from ``def`` to the last line) of every function in ``files``."""
    import ast

    found: list[tuple[str, int]] = []
    for path in files:
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        found.append((f"{module}:{name}", (child.end_lineno or child.lineno) - child.lineno + 1))
                    stack.append((child, name + "."))
    return found


def longest_function(root: Path, files: Iterable[Path]) -> dict[str, Any]:
    """The longest function of ``files`` (see :func:`function_lengths`) as {"name", "lines"}."""
    name, lines = max(function_lengths(root, files), key=lambda f: f[1], default=("", 0))
    return {"name": name, "lines": lines}


def rooms_figures(package: str, edges: dict[str, set[str]], root: Path) -> dict[str, Any]:
    """Rooms, arrows and floors of ``package`` (see the module docstring), its largest module and longest function."""
    arrows: dict[str, set[str]] = {}
    for a, targets in edges.items():
        ra = room_of(a, package)
        if ra is None:
            continue
        arrows.setdefault(ra, set())
        for b in targets:
            rb = room_of(b, package)
            if rb is not None and rb != ra:
                arrows[ra].add(rb)
                arrows.setdefault(rb, set())
    package_dir = root.joinpath(*package.split("."))
    files = list(package_dir.rglob("*.py"))
    sizes = sorted(((p.relative_to(root).as_posix(), len(p.read_text(encoding="utf-8").splitlines())) for p in files),
                   key=lambda s: -s[1])
    return {
        "package": package,
        "rooms": len(arrows),
        "modules": sum(1 for m in edges if m.startswith(package + ".") and m.split(".")[-1] != "__init__"),
        "floors": floors(arrows),
        "arrows": sum(len(t) for t in arrows.values()),
        "circles": circles(arrows),
        "largest_module": {"path": sizes[0][0], "lines": sizes[0][1]} if sizes else None,
        "longest_function": longest_function(root, files),
    }


def _covers(names: Iterable[str], module: str) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def outside_contracts(modules: Iterable[str], pyproject: Path) -> tuple[list[str], list[str]]:
    """(modules no contract names, modules outside every ``layers`` contract); the root package excluded."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    named: set[str] = set()
    layered: set[str] = set()
    for c in contracts:
        for key in ("source_modules", "layers", "modules"):
            for entry in c.get(key, []):
                for name in entry.replace(":", "|").split("|"):
                    named.add(name.strip(" ()"))
                    if c["type"] == "layers":
                        layered.add(name.strip(" ()"))
    mods = sorted(m for m in modules if m != "spx")
    return [m for m in mods if not _covers(named, m)], [m for m in mods if not _covers(layered, m)]


class Tracer:
    """Records, for every call into spx code, the spx frames above it; keeps the longest stack."""

    def __init__(self, package_dir: Path) -> None:
        self.prefix = str(package_dir) + os.sep
        self.root = package_dir.parent
        self.longest: list[tuple[str, str]] = []
        self.files: set[str] = set()
        self.climb_edges: set[tuple[str, str]] = set()

    def _module(self, filename: str) -> str:
        rel = Path(filename).relative_to(self.root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(self.prefix):
            return
        chain: list[tuple[str, str]] = []
        f = frame
        while f is not None:
            if f.f_code.co_filename.startswith(self.prefix):
                chain.append((self._module(f.f_code.co_filename), f.f_code.co_name))
            f = f.f_back
        chain.reverse()
        self.files.add(chain[-1][0])
        if len(chain) > 1:
            caller, callee = chain[-2][0], chain[-1][0]
            rc, re_ = rank(caller), rank(callee)
            if rc is not None and re_ is not None and re_ > rc:
                self.climb_edges.add((caller, callee))
        if (hops(chain), len(chain)) > (hops(self.longest), len(self.longest)):
            self.longest = chain


def hops(chain: list[tuple[str, str]]) -> int:
    """Steps of ``chain`` from one module to another."""
    return sum(a[0] != b[0] for a, b in zip(chain, chain[1:], strict=False))


def climbs(chain: list[tuple[str, str]]) -> int:
    """Steps of ``chain`` from a module to one in a higher layer."""
    count = 0
    for (a, _), (b, _) in zip(chain, chain[1:], strict=False):
        ra, rb = rank(a), rank(b)
        count += ra is not None and rb is not None and rb > ra
    return count


def trace_run(repo: Path, package_dir: Path) -> dict[str, Any]:
    """Run ``spx run examples/quickstart.yaml`` in this process under the tracer; the trail's figures."""
    from spx.cli import main

    tracer = Tracer(package_dir)
    with tempfile.TemporaryDirectory(prefix="spx-house-") as tmp:
        argv = ["run", str(repo / "examples" / "quickstart.yaml"), "--out", str(Path(tmp) / "out")]
        threading.setprofile(tracer)
        sys.setprofile(tracer)
        try:
            with contextlib.redirect_stdout(sys.stderr):  # spx run's report; this script's JSON owns stdout
                code = main(argv)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    chain = tracer.longest
    files = []
    for module, _ in chain:
        if not files or files[-1] != module:
            files.append(module)
    return {
        "exit_code": code,
        "spx_modules_called": len(tracer.files),
        "upward_call_edges": sorted(f"{a} -> {b}" for a, b in tracer.climb_edges),
        "longest_trail": {"module_hops": hops(chain), "depth": len(chain), "modules": len(set(m for m, _ in chain)),
                          "climbs": climbs(chain), "steps": [f"{m}.{fn}" for m, fn in chain]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1], help="checkout to measure")
    parser.add_argument("--trace", action="store_true", help="also trace `spx run` on the CPU quickstart")
    parser.add_argument("--package", default="spx.controller", help="the package whose rooms to count")
    args = parser.parse_args()
    repo = args.repo.resolve()
    package_dir = repo / "operator" / "spx"
    import spx

    if Path(spx.__file__).resolve().parent != package_dir:
        parser.error(f"spx imports from {Path(spx.__file__).parent}, not {package_dir}: set PYTHONPATH={repo}/operator")
    RANK.clear()
    RANK.update(layer_ranks(repo / "pyproject.toml"))
    edges = import_graph()
    no_contract, no_layer = outside_contracts(edges, repo / "pyproject.toml")
    report: dict[str, Any] = {
        "repo": str(repo),
        "layers": sorted((m for m in RANK if m.removeprefix("spx.") not in FORMER), key=lambda m: -RANK[m]),
        "largest_modules": [{"path": p, "lines": n} for p, n in largest(package_dir)],
        "longest_function": longest_function(package_dir.parent, package_dir.rglob("*.py")),
        "import_circles": circles(edges),
        "imports_up_the_layers": upward(edges),
        "modules_outside_every_contract": no_contract,
        "modules_outside_the_layers_contract": no_layer,
        "rooms": rooms_figures(args.package, edges, package_dir.parent),
    }
    if args.trace:
        report["spx_run_trace"] = trace_run(repo, package_dir)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
