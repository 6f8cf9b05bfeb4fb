"""Load experiment files and turn pydantic errors into messages a user can act on.

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
import re
from typing import Any

import yaml
from pydantic import ValidationError

from spx.api.base import dump_model as dump_model  # re-exported: the one implementation is in base
from spx.api.combinations import CombinationError
from spx.api.k8s_patterns import DNS_SUBDOMAIN, LABEL_KEY, LABEL_VALUE, QUANTITY
from spx.api.spec import API_VERSION, KIND, Experiment, ExperimentSpec

#: What each pattern of the models means, for error messages.
PATTERN_HELP = {
    LABEL_VALUE: "a Kubernetes label value: at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric "
    "(e.g. NVIDIA-H200)",
    LABEL_KEY: "a Kubernetes label key: [DNS-subdomain prefix/]name, e.g. nvidia.com/gpu.product",
    DNS_SUBDOMAIN: "a DNS-1123 subdomain: lower-case a-z 0-9 - . starting and ending alphanumeric",
    QUANTITY: "a Kubernetes quantity such as 32, 500m or 192Gi",
}


#: Largest experiment document accepted (bytes of UTF-8): a real experiment is a few KiB; 256 KiB is the
#: API server's limit on an object's annotations, far below the ~1.5 MiB etcd request limit.
MAX_DOCUMENT_BYTES = 256 << 10
#: Most YAML nodes a document may expand to with its aliases resolved (a 100,000-entry token list is
#: ~100,000 nodes and is still loaded, so that validation can say what is wrong with it).
MAX_EXPANDED_NODES = 200_000
#: Most problems listed in one :class:`SpecError` (the rest are counted).
MAX_PROBLEMS = 20
#: Characters of a bad value quoted in a message.
EXCERPT_CHARS = 80


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, with the size of a long list, dict or string.

    >>> excerpt(list(range(100_000)))
    '[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22…] (100000 items)'
    """
    if isinstance(value, dict | list | tuple):
        head = repr(value[:64] if not isinstance(value, dict) else dict(list(value.items())[:16]))
    elif isinstance(value, str | bytes):
        head = repr(value[: limit + 1])
    else:
        head = repr(value)
    if len(head) <= limit:
        return head
    size = f" ({len(value)} {'items' if isinstance(value, list | tuple | dict) else 'characters'})" if hasattr(
        value, "__len__") else ""
    return head[: limit - 1] + "…" + size


def clip(text: str, limit: int = 500) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _section_of(problem: str) -> str:
    """The section a problem line is about: its path's first two parts (``spec.kernel``, ``metadata.labels``;
    list indices and map keys below them do not count)."""
    head = re.sub(r"\[[^]]*\]", "", problem.split(":", 1)[0])
    return ".".join(head.split(".")[:2])


def _bounded(problems: list[str]) -> list[str]:
    """At most :data:`MAX_PROBLEMS` lines, then ``… and N more problems`` with N the lines left out.

    Every section (:func:`_section_of`) gets its first problem listed before any gets a second one, so
    40 bad labels cannot hide a bad ``spec.kernel.samples``; the lines kept stay in their original order.
    """
    if len(problems) <= MAX_PROBLEMS or (len(problems) == MAX_PROBLEMS + 1 and problems[-1].startswith("… and ")):
        return problems  # (already bounded)
    first: dict[str, int] = {}
    for i, p in enumerate(problems):
        first.setdefault(_section_of(p), i)
    keep = set(list(first.values())[:MAX_PROBLEMS])
    for i in range(len(problems)):
        if len(keep) >= MAX_PROBLEMS:
            break
        keep.add(i)
    shown = [p for i, p in enumerate(problems) if i in keep]
    return [*shown, f"… and {len(problems) - len(shown)} more problems"]


class SpecError(ValueError):
    """An experiment failed validation.

    ``problems`` holds one line per invalid field: ``<path>: <what is wrong> (got <value>)``, the
    path in the camelCase spelling of the YAML (``spec.sweep.tokens[2]``).
    """

    def __init__(self, problems: list[str], source: str = "experiment") -> None:
        problems = _bounded(problems)
        self.problems = problems
        self.source = source
        super().__init__(f"invalid {source}:\n" + "\n".join(f"  - {p}" for p in problems))


def _loc_to_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]":
            path += " (the key)"
        elif part.startswith("function-") or part in {"literal", "str", "int"}:
            continue
        else:
            path += f".{part}" if path else part
    return path or "(top level)"


#: What each list field holds, with an example (its path with list indices dropped).
LIST_HELP = {
    "spec.sweep.tokens": "a list of token counts, e.g. [512, 2048]",
    "spec.stage.tokens": "a list of token counts, e.g. [512, 2048]",
    "spec.projection.outputSizes": "a list of output sizes, one per fused projection, e.g. [1280, 512]",
    "spec.resources.gpuProducts": "a list of nvidia.com/gpu.product values, e.g. [NVIDIA-H200]",
    "spec.resources.tolerations": "a list of tolerations, e.g. [{key: nvidia.com/gpu, operator: Exists}]",
    "spec.serving.extraArgs": 'a list of strings, e.g. ["--max-model-len", "8192"]',
    "spec.serving.extraBenchArgs": 'a list of strings, e.g. ["--request-rate", "inf"]',
    "spec.serving.points": "a list of points, e.g. [{name: p1, inputLen: 2048, outputLen: 1, concurrency: 1, "
    "numPrompts: 16, metric: ttft}]",
    "spec.serving.arms": "a list of arms, e.g. [{name: main, variant: main}, {name: split, variant: split}]",
    "spec.accuracy.arms": "a list of serving arm names, e.g. [main, split]",
    "spec.stage.layerKinds": "a list of layer kinds, e.g. [{name: plain, layers: [0, 1]}]",
    "spec.stage.layerKinds.layers": "a list of layer indices, e.g. [0, 1, 2]",
    "spec.pod.env": "a list of variables, e.g. [{name: NCCL_DEBUG, value: INFO}]",
    "spec.pod.volumes": "a list of volumes, e.g. [{name: cache, mountPath: /cache, emptyDir: {}}]",
}


def _kind(value: Any) -> str:
    """What a YAML value is, in YAML's words."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list | tuple) else "a mapping" if isinstance(value, dict) else type(value).__name__


def _fix(kind: str, ctx: dict[str, Any], value: Any, path: str) -> str | None:
    """What is expected and how to fix it, for pydantic error type ``kind``; ``None``: keep pydantic's message."""
    quoted = " (unquoted: quotes make it a string)" if isinstance(value, str) else ""
    if kind in ("int_type", "int_from_float", "int_parsing"):
        return "must be a whole number (an integer count, e.g. 2048)" + quoted
    if kind in ("float_type", "float_parsing"):
        return "must be a number, e.g. 1.5" + quoted
    if kind in ("bool_type", "bool_parsing"):
        return "must be true or false" + quoted
    if kind == "string_type":
        hint = f": quote it, e.g. \"{value}\"" if isinstance(value, int | float) and not isinstance(value, bool) else (
            ": quote it, e.g. \"true\"" if isinstance(value, bool) else ": give a value or leave the field out"
            if value is None else "")
        return f"must be a string, not {_kind(value)}{hint}"
    if kind == "list_type":
        what = LIST_HELP.get(re.sub(r"\[[^]]*\]", "", path), "a list, e.g. [1, 2]")
        single = f"; put even one value in brackets: [{value}]" if isinstance(value, int | float | str) and not isinstance(value, bool) else ""
        return f"must be {what}, not {_kind(value)}{single}"
    if kind in ("dict_type", "model_type"):
        return f"must be a mapping of key: value fields (indented lines, or {{key: value}}), not {_kind(value)}"
    if kind == "missing":
        return "required: add it"
    if kind == "greater_than":
        bound = ctx.get("gt")
        example = f", e.g. {bound + 1}" if isinstance(bound, int) else ""
        return f"must be greater than {bound}: use a larger value{example}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}: raise it to {ctx.get('ge')} or more"
    if kind == "less_than":
        return f"must be less than {ctx.get('lt')}: use a smaller value"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}: lower it to {ctx.get('le')} or less"
    if kind == "string_too_short":
        n = ctx.get("min_length")
        return ("must not be empty: give a value or leave the field out" if n == 1
                else f"must have at least {n} characters: lengthen it")
    if kind == "string_too_long":
        return f"must have at most {ctx.get('max_length')} characters: shorten it"
    if kind in ("too_long", "too_short"):
        n = ctx.get("max_length" if kind == "too_long" else "min_length")
        have = ctx.get("actual_length")
        if kind == "too_long":
            return f"must have at most {n} items, has {have}: remove some"
        return f"must have at least {n} item{'s' if n != 1 else ''}, has {have}: add {'one' if n == 1 else 'more'}"
    if kind == "enum":
        return f"must be one of: {ctx.get('expected')} (check the spelling and case)"
    if kind == "union_tag_invalid":
        return (f"its {ctx.get('discriminator')} must be one of: {ctx.get('expected_tags')} "
                f"(got {ctx.get('tag')!r})")
    if kind == "union_tag_not_found":
        return f"needs a {ctx.get('discriminator')} field saying which kind it is: add it"
    return None


def describe_validation_error(err: ValidationError, prefix: str = "") -> list[str]:
    """One readable line per pydantic error: field path (camelCase), what is expected and how to fix it,
    the bad value (``(got <excerpt>)``)."""
    lines = []
    for e in err.errors(include_url=False):
        path = _loc_to_path(prefix, tuple(e["loc"]))
        msg = e["msg"].removeprefix("Value error, ")
        ctx = e.get("ctx", {})
        value = e.get("input")
        if e["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling (fields are camelCase)"
        elif e["type"] == "string_pattern_mismatch":
            msg = "must be " + PATTERN_HELP.get(str(ctx.get("pattern")), f"of the form {ctx.get('pattern')}")
        elif e["type"] == "literal_error":
            msg = msg.replace("Input should be", "must be one of:") + " (check the spelling and case)"
        elif e["type"] == "finite_number":
            msg = "must be a finite number (not .inf, -.inf or .nan)"
        else:
            msg = _fix(e["type"], ctx, value, path) or msg
        cause = ctx.get("error")
        if isinstance(cause, CombinationError):  # several problems at once, each names its own field
            lines.extend(cause.problems)
            continue
        lines.append(f"{path}: {clip(msg, 300)} (got {excerpt(value)})")
    return _bounded(lines)


def validate_spec(raw: dict[str, Any] | None, source: str = "experiment") -> ExperimentSpec:
    """Validate a ``spec`` mapping as the operator receives it.

    Raises:
        SpecError: with one line per invalid field, paths prefixed ``spec.``.
    """
    try:
        return ExperimentSpec.model_validate(raw or {}, by_alias=True, by_name=False)
    except ValidationError as err:
        raise SpecError(describe_validation_error(err, "spec"), source) from None


def parse_experiment(doc: Any, source: str = "experiment") -> Experiment:
    """Validate a whole object (``apiVersion``, ``kind``, ``metadata``, ``spec``).

    Raises:
        SpecError: when it is not a ShardedProjectionExperiment or a field is invalid.
    """
    if not isinstance(doc, dict):
        raise SpecError([f"(top level): expected a mapping with apiVersion/kind/metadata/spec (got {type(doc).__name__})"], source)
    if doc.get("kind") not in (None, KIND) or doc.get("apiVersion") not in (None, API_VERSION):
        raise SpecError(
            [f"kind/apiVersion: expected kind {KIND} and apiVersion {API_VERSION} "
             f"(got {doc.get('kind')!r} / {doc.get('apiVersion')!r})"],
            source,
        )
    try:
        return Experiment.model_validate(doc, by_alias=True, by_name=False)
    except ValidationError as err:
        raise SpecError(describe_validation_error(err), source) from None


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (libyaml's C parser when available)."""


def _check_node(root: yaml.Node) -> list[str]:
    """Problems of a composed document: duplicate mapping keys, alias expansion past the limit.

    Walks each distinct node once; the expanded size of a node is memoised, so the walk is linear in
    the file even when aliases nest (a size is computed before its parents sum it).
    """
    sizes: dict[int, int] = {}
    problems: list[str] = []
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes or isinstance(node, yaml.ScalarNode):
            continue
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = node.value
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if not isinstance(c, yaml.ScalarNode) and id(c) not in sizes)
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


def _syntax_problem(err: yaml.YAMLError, source: str) -> str:
    """One line on a YAML syntax error: the file as the user named it, line and column, what is wrong there."""
    mark = getattr(err, "problem_mark", None)
    if not isinstance(err, yaml.MarkedYAMLError) or mark is None:
        return f"(YAML) {source}: {clip(str(err))}"
    context = ""
    if err.context:
        where = err.context_mark
        context = f" ({err.context}" + (
            f" started at line {where.line + 1}, column {where.column + 1}" if where is not None else "") + ")"
    return (f"(YAML) {source}, line {mark.line + 1}, column {mark.column + 1}: {clip(err.problem or 'syntax error', 300)}"
            f"{context}; fix the YAML syntax there")


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
        raise SpecError([_syntax_problem(err, source)], source) from None
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
