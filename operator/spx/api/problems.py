"""Turn pydantic errors into messages a user can act on: one line per problem, bounded.

Each line names the field (camelCase path, ``spec.sweep.tokens[2]``), says what is expected and how to
fix it (pydantic's own wording only where nothing better is known), and quotes a bounded excerpt of the
bad value (:func:`excerpt`); an unknown field names the closest known one (``sampels`` → ``samples``);
the items of one list with the same problem share a line; at most :data:`MAX_PROBLEMS` lines are listed,
every section's first problem before any section's second, so 100,000 bad token counts give a
screenful, not 700 KB. Used by :mod:`spx.api.loading` (experiment files), the CLI (result and status
documents) and the operator (bench results).
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from spx.api.combinations import CombinationError
from spx.api.k8s_patterns import DNS_SUBDOMAIN, LABEL_KEY, LABEL_VALUE, QUANTITY

#: What each pattern of the models means, for error messages.
PATTERN_HELP = {
    LABEL_VALUE: "a Kubernetes label value: at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric "
    "(e.g. NVIDIA-H200)",
    LABEL_KEY: "a Kubernetes label key: [DNS-subdomain prefix/]name, e.g. nvidia.com/gpu.product",
    DNS_SUBDOMAIN: "a DNS-1123 subdomain: lower-case a-z 0-9 - . starting and ending alphanumeric",
    QUANTITY: "a Kubernetes quantity such as 32, 500m or 192Gi",
}



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


def _exponent_whole(text: str) -> int | None:
    """The whole number ``text`` writes in exponent form (``1e3`` → 1000; YAML 1.1 reads it as a string), else ``None``."""
    if len(text) > 24 or not re.fullmatch(r"[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+", text):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and abs(value) < 1e18 else None


#: Text that looks like a number (digits, a sign, a point, an exponent, a base prefix) but that YAML 1.1 may read
#: as a string: ``1e309``, ``0o40``, ``1e3``.
_NUMBER_LIKE = re.compile(r"[-+]?(?:0[xob][0-9a-f_]+|[0-9_]*\.?[0-9_]+(?:e[-+]?[0-9]+)?)", re.IGNORECASE)


def _string_hint(value: Any) -> str:
    """Why a number field got a string, from the text alone: a plain scalar YAML 1.1 reads as a number can only
    be a string when it was quoted (then: unquote it); text that looks like a number but that YAML 1.1 reads as
    text (``1e309``, ``0o40``) is said to be so, with what to write; anything else gets no hint."""
    import yaml

    if not isinstance(value, str) or len(value) > 40:
        return ""
    try:
        plain = yaml.safe_load(value)
    except yaml.YAMLError:
        plain = value
    if isinstance(plain, int | float):  # (bool too: a quoted 'false')
        return " (a string here: write it without quotes or a !!str tag)"
    if not _NUMBER_LIKE.fullmatch(value):
        return ""
    text = value.lower().replace("_", "")
    if text.lstrip("+-").startswith("0o"):
        return (f" (YAML read {value} as text: 0o is YAML 1.2's octal prefix and YAML 1.1 has none; write "
                f"{int(text.replace('0o', '', 1), 8)})")
    try:
        number = float(text)
    except ValueError:
        return f" (YAML read {value} as text, not a number)"
    if number in (float("inf"), float("-inf")):
        return f" (YAML read {value} as text: it is beyond the largest 64-bit floating-point number, about 1.8e308)"
    shown = str(int(number)) if number.is_integer() and abs(number) < 1e18 else _yaml11_float(number)
    return f" (YAML read {value} as text, not a number: write {shown})"


def _yaml11_float(number: float) -> str:
    """``number`` as text YAML 1.1 reads as a float: its exponent form needs a decimal point in the mantissa
    (``1e-300`` is text, ``1.0e-300`` a number; PyYAML's float resolver, YAML 1.1 ``tag:yaml.org,2002:float``)."""
    text = repr(number)
    mantissa, sep, exponent = text.partition("e")
    if sep and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


#: The bound of each comparison error, as a ``_fix`` for a NaN words it (`` between …`` is not known here).
_BOUNDS: dict[str, Any] = {
    "greater_than": lambda ctx: f" greater than {ctx.get('gt')}",
    "greater_than_equal": lambda ctx: f" of at least {ctx.get('ge')}",
    "less_than": lambda ctx: f" less than {ctx.get('lt')}",
    "less_than_equal": lambda ctx: f" of at most {ctx.get('le')}",
}


def _fix(kind: str, ctx: dict[str, Any], value: Any, path: str) -> str | None:
    """What is expected and how to fix it, for pydantic error type ``kind``; ``None``: keep pydantic's message."""
    if isinstance(value, float) and math.isnan(value) and kind in _BOUNDS:  # (NaN fails every bound)
        return f"must be a number{_BOUNDS[kind](ctx)}, not .nan (not a number): give one, or leave the field out"
    quoted = _string_hint(value)
    if kind in ("int_type", "int_from_float", "int_parsing"):
        if isinstance(value, str) and (whole := _exponent_whole(value)) is not None:
            return f"must be a whole number: write {whole} (YAML reads {value} as text)"
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


def _model_at(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The pydantic model that holds the field at ``loc`` (camelCase aliases, list indices and map keys
    stepped through), or None where the path leaves the models."""
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue  # (the list's item type was taken with the field)
        field = next((f for name, f in model.model_fields.items() if part in (f.alias, name)), None)
        if field is None:
            return None
        model = _first_model(field.annotation)
    return model


def _first_model(annotation: Any) -> type[BaseModel] | None:
    """The first pydantic model in ``annotation`` (``X``, ``X | None``, ``list[X]``, ``dict[str, X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _required_fields(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> list[str]:
    """The required fields (camelCase) of the section at ``loc``; empty where unknown or none is required."""
    section = _model_at(model, loc)
    if section is None:
        return []
    return [f.alias or name for name, f in section.model_fields.items() if f.is_required()]


#: Fields of an earlier schema, by (section class, field): what became of them (an unknown-field message would
#: suggest the nearest name, which for these is another field with another meaning).
REMOVED_FIELDS: dict[tuple[str, str], str] = {
    ("StepSpec", "pad"): ("removed: the step curve always measures off-aligned lengths (sp_shard's pad path) beside the "
                          "aligned ones; padFree is a different arm (the pad-free shard spx proposes), not a "
                          "replacement: remove pad"),
    ("StepSpec", "quantile"): ("removed: the statistic of the per-round differences is now statistic: median or mean "
                               "(median by default): remove quantile, or write statistic: median|mean"),
    ("StepSpec", "positiveControl"): ("removed: the positive control always runs; its size is positiveControlMs (ms "
                                      "per step, default 1.0): remove positiveControl, or write positiveControlMs: 1.0"),
}


def _unknown_field(model: type[BaseModel] | None, loc: tuple[int | str, ...], listed: set[type[BaseModel]]) -> str:
    """The message for an unknown field: the closest known field of the same section when there is one
    (``sampels`` → ``samples``; :func:`difflib.get_close_matches`), else the section's fields — once per
    section (``listed`` holds the sections already listed)."""
    base = "unknown field; remove it or check its spelling (fields are camelCase)"
    holder = _model_at(model, loc[:-1]) if loc else None
    if holder is None or not isinstance(loc[-1], str):
        return base
    known = [f.alias or name for name, f in holder.model_fields.items()]
    if (removed := REMOVED_FIELDS.get((holder.__name__, loc[-1]))) is not None:
        return removed
    if elsewhere := _nested_field(holder, loc[-1]):  # ``spec.step``: a field of a section inside this one
        return (f"unknown field here; {loc[-1]} belongs under {elsewhere.rsplit('.', 1)[0]} ({elsewhere}): move it "
                "there")
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
    if close:
        return f"unknown field; did you mean {close[0]!r}? (fields are camelCase)"
    if holder in listed:
        return "unknown field; remove it"
    listed.add(holder)
    return f"unknown field; remove it (this section has: {', '.join(known)})"


def _nested_field(model: type[BaseModel], name: str, depth: int = 3) -> str | None:
    """The camelCase path (``serving.step``) of the first field called ``name`` in a section nested in ``model``
    (breadth first, at most ``depth`` sections down), else ``None``."""
    level: list[tuple[str, type[BaseModel]]] = [("", model)]
    for _ in range(depth):
        deeper: list[tuple[str, type[BaseModel]]] = []
        for prefix, section in level:
            for field_name, f in section.model_fields.items():
                sub_model = _first_model(f.annotation)
                if sub_model is None:
                    continue
                here = f"{prefix}{f.alias or field_name}"
                if any(name in (g.alias, n) for n, g in sub_model.model_fields.items()):
                    return f"{here}.{name}"
                deeper.append((f"{here}.", sub_model))
        level = deeper
    return None


def _collapse_list_items(entries: list[tuple[str, str, Any]]) -> list[str]:
    """``(path, message, value)`` → lines, where the items of one list with the same message become one
    line: ``spec.sweep.tokens[0…33] (34 items): must be … (got -1, -2, -3, …)`` — so 34 bad token counts
    take one line and leave room for the other fields' problems."""
    groups: dict[tuple[str, str], list[tuple[int, Any]]] = {}
    order: list[tuple[str, str] | int] = []
    for i, (path, msg, value) in enumerate(entries):
        m = re.fullmatch(r"(.*)\[(\d+)\]", path)
        if m is None:
            order.append(i)
            continue
        key = (m.group(1), msg)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((int(m.group(2)), value))
    lines = []
    for item in order:
        if isinstance(item, int):
            path, msg, value = entries[item]
            lines.append(f"{path}: {clip(msg, 300)} (got {excerpt(value)})")
            continue
        members = groups[item]
        if len(members) == 1:
            (index, value), = members
            lines.append(f"{item[0]}[{index}]: {clip(item[1], 300)} (got {excerpt(value)})")
            continue
        indices = [i for i, _ in members]
        where = (f"[{indices[0]}…{indices[-1]}]" if indices == list(range(indices[0], indices[-1] + 1))
                 else "[" + ", ".join(map(str, indices[:8])) + (", …" if len(indices) > 8 else "") + "]")
        got = ", ".join(excerpt(v, 20) for _, v in members[:6]) + (", …" if len(members) > 6 else "")
        lines.append(f"{item[0]}{where} ({len(members)} items): {clip(item[1], 300)} (got {got})")
    return lines


#: The field a cross-field message starts with (``serving.step.thresholds [1] must be …``): camelCase, dotted.
_LEADING_FIELD = re.compile(r"([a-z][A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*)+) ")


def _cross_field_line(path: str, msg: str) -> str | None:
    """A section's cross-field rule whose message starts with the dotted path of the field it is about
    (``serving.step.thresholds [1] must be …``), as one line at that field, without an excerpt of the whole
    section (it named ``spec`` and ended ``(got {'projection': … (7 items))``, issue 37); ``None`` for any other
    message (it keeps the section's path and the excerpt)."""
    if (m := _LEADING_FIELD.match(msg)) is None:
        return None
    return f"{path}.{m.group(1)}: {clip(msg[m.end():], 300)}"


def describe_validation_error(err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> list[str]:
    """One readable line per pydantic error: field path (camelCase), what is expected and how to fix it,
    the bad value (``(got <excerpt>)``); items of one list with the same problem share a line. With
    ``model`` (the validated class), an unknown field names the closest known one."""
    lines: list[str] = []
    entries: list[tuple[str, str, Any]] = []
    listed: set[type[BaseModel]] = set()
    for e in err.errors(include_url=False):
        path = _loc_to_path(prefix, tuple(e["loc"]))
        msg = e["msg"].removeprefix("Value error, ")
        ctx = e.get("ctx", {})
        value = e.get("input")
        if e["type"] == "extra_forbidden":
            msg = _unknown_field(model, tuple(e["loc"]), listed)
        elif e["type"] == "string_pattern_mismatch":
            msg = "must be " + PATTERN_HELP.get(str(ctx.get("pattern")), f"of the form {ctx.get('pattern')}")
        elif e["type"] == "literal_error":
            msg = msg.replace("Input should be", "must be one of:") + " (check the spelling and case)"
        elif e["type"] == "finite_number":
            msg = "must be a finite number (not .inf, -.inf or .nan)"
        elif e["type"] == "model_type" and value is None and (required := _required_fields(model, tuple(e["loc"]))):
            msg = (f"is empty: give its fields as indented lines under it; required: {', '.join(required)} "
                   f"(e.g. {required[0]}: …)")
        else:
            msg = _fix(e["type"], ctx, value, path) or msg
        cause = ctx.get("error")
        if isinstance(cause, CombinationError):  # several problems at once, each names its own field
            lines.extend(cause.problems)
            continue
        if e["type"] == "value_error" and isinstance(value, dict) and (line := _cross_field_line(path, msg)):
            lines.append(line)  # a cross-field rule of a whole section, at the field it names
            continue
        entries.append((path, msg, value))
    return _bounded([*_collapse_list_items(entries), *lines])
