"""Load experiment files; their problems are worded by :mod:`spx.api.problems`.

YAML is loaded defensively, since an experiment file may come from anyone who can open a pull request:

- a document over :data:`MAX_DOCUMENT_BYTES` is refused before parsing;
- the composed node graph is walked once (memoised, so linear in the file) and a document whose
  aliases would expand past :data:`MAX_EXPANDED_NODES` nodes ("billion laughs") is refused before any
  Python object is built or validated;
- a mapping with the same key twice is an error naming both lines (YAML 1.2 forbids it; PyYAML keeps
  the last one silently);
- every message quotes a bounded excerpt of the bad value (:func:`excerpt`) and at most
  :data:`MAX_PROBLEMS` problems are listed, so 100,000 bad token counts give a screenful, not 700 KB.
"""

from __future__ import annotations

import io
import os
import re
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from spx.api.base import dump_model as dump_model  # re-exported: the one implementation is in base
from spx.api.problems import EXCERPT_CHARS as EXCERPT_CHARS  # (re-exported: the messages live in spx.api.problems)
from spx.api.problems import MAX_PROBLEMS as MAX_PROBLEMS
from spx.api.problems import PATTERN_HELP as PATTERN_HELP
from spx.api.problems import SpecError as SpecError
from spx.api.problems import clip as clip
from spx.api.problems import describe_validation_error as describe_validation_error
from spx.api.problems import excerpt as excerpt
from spx.api.spec import API_VERSION, KIND, Experiment, ExperimentSpec
from spx.vocabulary import MANIFEST_SCHEMA

#: Largest experiment document accepted (bytes of UTF-8): a real experiment is a few KiB; 256 KiB is the
#: API server's limit on an object's annotations, far below the ~1.5 MiB etcd request limit.
MAX_DOCUMENT_BYTES = 256 << 10
#: Most YAML nodes a document may expand to with its aliases resolved (a 100,000-entry token list is
#: ~100,000 nodes and is still loaded, so that validation can say what is wrong with it).
MAX_EXPANDED_NODES = 200_000


def validate_spec(raw: dict[str, Any] | None, source: str = "experiment") -> ExperimentSpec:
    """Validate a ``spec`` mapping as the operator receives it.

    Raises:
        SpecError: with one line per invalid field, paths prefixed ``spec.``.
    """
    try:
        return ExperimentSpec.model_validate(raw or {}, by_alias=True, by_name=False)
    except ValidationError as err:
        raise SpecError(describe_validation_error(err, "spec", ExperimentSpec), source) from None


#: What a JSON document is (:func:`kind_of`).
DocumentKind = Literal["result", "summary", "status", "object", "bench", "manifest", "other"]

#: The fields of an :class:`~spx.api.status.ExperimentStatus` that mark a document as one (and the JSON type of
#: each, as ``spx gate`` checks them).
STATUS_FIELDS: dict[str, type] = {"phase": str, "conditions": list, "verdict": str, "observedGeneration": int}


def kind_of(data: Any) -> DocumentKind:
    """What a JSON document is: the one "what is this file" test of spx (``spx validate``, ``spx gate``,
    ``spx report``, ``spx predict`` and :class:`spx.rundir.RunDirectory` ask it).

    ``result`` (a run's ``result.json``, :class:`spx.api.result.KernelResult`: a ``spx.dev/kernel-result…``
    schemaVersion, or both ``points`` and ``worldSize``), ``summary`` (``spx.dev/kernel-summary…``), ``manifest``
    (:data:`spx.vocabulary.MANIFEST_SCHEMA`), ``bench`` (another ``spx.dev/`` document: a serving, accuracy, step
    or stage result), ``object`` (``kind``/``apiVersion``: an experiment, or ``kubectl get -o json``), ``status``
    (no schemaVersion and no ``points``, and one of :data:`STATUS_FIELDS` or a ``kernel`` section), else ``other``.
    """
    if not isinstance(data, dict):
        return "other"
    schema = str(data.get("schemaVersion") or "")
    if schema.startswith("spx.dev/kernel-summary"):
        return "summary"
    if schema.startswith("spx.dev/kernel-") or {"points", "worldSize"} <= data.keys():
        return "result"
    if schema == MANIFEST_SCHEMA:
        return "manifest"
    if schema.startswith("spx.dev/"):
        return "bench"
    if "kind" in data or "apiVersion" in data:
        return "object"
    if not schema and "points" not in data and {*STATUS_FIELDS, "kernel"} & data.keys():
        return "status"
    return "other"


def is_run_result(doc: dict[str, Any]) -> bool:
    """Whether ``doc`` is a run's ``result.json`` (:func:`kind_of` says ``result``)."""
    return kind_of(doc) == "result"


def _run_document(doc: dict[str, Any]) -> str | None:
    """What a run's output document is (``a run's result (result.json)``, ``… status``), or ``None``: an experiment
    (or not a run's document either) has ``apiVersion``/``kind``, a run's output has neither."""
    kind = kind_of(doc)
    if kind == "result":
        return "a run's result (result.json)"
    if kind == "status" and "phase" in doc:
        return "a run's status (status.json)"
    return None


def parse_experiment(doc: Any, source: str = "experiment") -> Experiment:
    """Validate a whole object (``apiVersion``, ``kind``, ``metadata``, ``spec``).

    Raises:
        SpecError: when it is not a ShardedProjectionExperiment or a field is invalid.
    """
    if not isinstance(doc, dict):
        raise SpecError([f"(top level): expected a mapping with apiVersion/kind/metadata/spec (got {type(doc).__name__})"], source)
    if (what := _run_document(doc)) is not None:
        run_dir = os.path.dirname(source) or "."
        raise SpecError([f"(file): this is {what}, not an experiment: to re-analyse the run, spx report {run_dir}; "
                         "give an experiment YAML (kind: ShardedProjectionExperiment) here"], source)
    if doc.get("kind") not in (None, KIND) or doc.get("apiVersion") not in (None, API_VERSION):
        raise SpecError(
            [f"kind/apiVersion: expected kind {KIND} and apiVersion {API_VERSION} "
             f"(got {doc.get('kind')!r} / {doc.get('apiVersion')!r})"],
            source,
        )
    try:
        return Experiment.model_validate(doc, by_alias=True, by_name=False)
    except ValidationError as err:
        raise SpecError(describe_validation_error(err, model=Experiment), source) from None


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (libyaml's C parser when available), reading ``1.5e0`` as the number 1.5 as
    Kubernetes does (:data:`_UNSIGNED_EXPONENT_FLOAT`)."""


_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
#: A decimal point and an exponent without a sign (``1.5e0``, ``.5E3``): a float in YAML 1.2 and to Kubernetes
#: (``sigs.k8s.io/yaml``, go-yaml), text to YAML 1.1, whose float pattern wants a signed exponent (``1.5e+0``).
#: Read as the number here. ``1e3`` (no point) stays text: it is refused in a whole-number field with what to write.
_UNSIGNED_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9_]+)[eE][0-9]+$")
_Loader.add_implicit_resolver(_FLOAT_TAG, _UNSIGNED_EXPONENT_FLOAT, list("-+0123456789."))
_LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+")
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")


def _number_problem(node: yaml.ScalarNode, path: str) -> str | None:
    """A plain scalar that YAML 1.1 (PyYAML) reads as another number than it looks like: a leading zero (octal:
    ``016`` is 14) or colons (base 60: ``17:04`` is 1024). ``None`` for anything else."""
    text = node.value
    if node.style not in (None, "") or node.tag not in (_INT_TAG, _FLOAT_TAG, "tag:yaml.org,2002:str"):
        return None
    where = f"{path or '(top level)'} (line {node.start_mark.line + 1}, column {node.start_mark.column + 1})"
    if len(text) > 40 and (_LEADING_ZERO.fullmatch(text) or _SEXAGESIMAL.fullmatch(text)):
        return (f"{where}: YAML 1.1 reads a number with a leading 0 as octal and one with colons as base 60: write the "
                f"number without them, or quote it if it is text (got {excerpt(text)})")
    if _LEADING_ZERO.fullmatch(text):
        plain = int(text.replace("_", ""), 10)
        reads = f" ({text} is {int(text.replace('_', ''), 8)})" if node.tag == _INT_TAG else ""
        return f"{where}: write {plain}, not {text}: YAML 1.1 reads a leading 0 as octal{reads}; quote it if it is text"
    if node.tag != "tag:yaml.org,2002:str" and _SEXAGESIMAL.fullmatch(text):
        sign = -1 if text.startswith("-") else 1
        value = 0.0
        for part in text.lstrip("+-").replace("_", "").split(":"):
            value = value * 60 + float(part)
        shown = int(value) if value.is_integer() else value
        return (f"{where}: write {sign * shown}, not {text}: YAML 1.1 reads digits with colons as base 60; quote it "
                "if it is text")
    return None


def _check_node(root: yaml.Node) -> list[str]:
    """Problems of a composed document: duplicate mapping keys, alias expansion past the limit, numbers YAML 1.1
    reads otherwise than they look (:func:`_number_problem`).

    Walks each distinct node once; the expanded size of a node is memoised, so the walk is linear in
    the file even when aliases nest (a size is computed before its parents sum it).
    """
    sizes: dict[int, int] = {}
    problems: list[str] = []
    stack: list[tuple[yaml.Node, bool, str]] = [(root, False, "")]
    while stack:
        node, done, path = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if len(problems) < MAX_PROBLEMS and (problem := _number_problem(node, path)) is not None:
                problems.append(problem)
            continue
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
            named = [(v, f"{path}.{k.value}".lstrip(".") if isinstance(k, yaml.ScalarNode) else path)
                     for k, v in node.value]
        else:
            children = node.value
            named = [(v, f"{path}[{i}]") for i, v in enumerate(node.value)]
        if not done:
            stack.append((node, True, path))
            stack.extend((c, False, p) for c, p in reversed(named)
                         if isinstance(c, yaml.ScalarNode) or id(c) not in sizes)
            continue
        size = 1 + sum(1 if isinstance(c, yaml.ScalarNode) else sizes[id(c)] for c in children)
        sizes[id(node)] = size
        if size > MAX_EXPANDED_NODES:
            return [
                f"(YAML): the document expands to more than {MAX_EXPANDED_NODES:,} nodes with its aliases "
                f"resolved (line {node.start_mark.line + 1}): refusing an alias bomb; write the values out"
            ]
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, _ in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                if key.value in seen:
                    problems.append(
                        f"(YAML) line {key.start_mark.line + 1}: duplicate key {excerpt(key.value)} (first at line "
                        f"{seen[key.value]}); each key may appear once in a mapping, remove one"
                    )
                else:
                    seen[key.value] = key.start_mark.line + 1
    return problems


def _syntax_problem(err: yaml.YAMLError, source: str, text: str = "") -> str:
    """One line on a YAML syntax error: the file as the user named it, line and column, what is wrong there
    (and that YAML indents with spaces, where the problem is a tab)."""
    mark = getattr(err, "problem_mark", None)
    if not isinstance(err, yaml.MarkedYAMLError) or mark is None:
        return f"(YAML) {source}: {clip(str(err))}"
    context = ""
    if err.context:
        where = err.context_mark
        context = f" ({err.context}" + (
            f" started at line {where.line + 1}, column {where.column + 1}" if where is not None else "") + ")"
    lines = text.splitlines()
    bad_line = lines[mark.line] if 0 <= mark.line < len(lines) else ""
    if "\t" in bad_line[: mark.column + 1]:
        fix = "; YAML indents with spaces, not tabs: replace the tab there with spaces"
    else:
        fix = "; fix the YAML syntax there"
    return (f"(YAML) {source}, line {mark.line + 1}, column {mark.column + 1}: {clip(err.problem or 'syntax error', 300)}"
            f"{context}{fix}")


def load_yaml_document(text: str, source: str = "experiment") -> Any:
    """The single YAML document in ``text`` as Python data, loaded defensively (module docstring).

    Raises:
        SpecError: a document over :data:`MAX_DOCUMENT_BYTES`, YAML syntax errors, not exactly one
            document, duplicate keys, or aliases expanding past :data:`MAX_EXPANDED_NODES` nodes.
    """
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_DOCUMENT_BYTES:
        raise SpecError(
            [f"(file): {size:,} bytes is over the {MAX_DOCUMENT_BYTES:,}-byte limit of an experiment document "
             "(a real one is a few KiB): is this the right file? List at most 64 token counts"],
            source,
        )
    stream = io.StringIO(text)
    stream.name = source  # the name PyYAML's marks give (else "<unicode string>")
    loader = _Loader(stream)
    try:
        nodes = []
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                nodes.append(node)
        if len(nodes) != 1:
            raise SpecError([f"(file): expected exactly one YAML document, found {len(nodes)}"], source)
        problems = _check_node(nodes[0])
        if problems:
            raise SpecError(problems, source)
        return loader.construct_document(nodes[0])
    except yaml.YAMLError as err:
        raise SpecError([_syntax_problem(err, source, text)], source) from None
    except RecursionError:
        raise SpecError(["(YAML): the document nests too deeply"], source) from None
    finally:
        loader.dispose()


def load_experiment(text: str, source: str = "experiment") -> Experiment:
    """Parse YAML text of one experiment, the file a user would ``kubectl apply``.

    Raises:
        SpecError: on an oversized or alias-exploding document, YAML syntax errors, duplicate keys,
            several documents, or invalid fields (see :func:`load_yaml_document`).
    """
    return parse_experiment(load_yaml_document(text, source), source)
