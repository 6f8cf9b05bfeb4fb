"""spx.api.loading: defensive YAML (size, alias expansion, duplicate keys) and bounded messages."""

from __future__ import annotations

import enum

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spx.api import SpecError, load_experiment
from spx.api.loading import (
    MAX_DOCUMENT_BYTES,
    MAX_EXPANDED_NODES,
    MAX_PROBLEMS,
    describe_validation_error,
    excerpt,
    load_yaml_document,
)

HEAD = "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\nmetadata: {name: t}\n"


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_experiment(text, "f.yaml")
    return err.value.problems


@pytest.mark.parametrize(("value", "expected"), [
    (3, "3"),
    ("x" * 10, "'xxxxxxxxxx'"),
    (list(range(5)), "[0, 1, 2, 3, 4]"),
])
def test_excerpt_short_values_are_whole(value: object, expected: str) -> None:
    assert excerpt(value) == expected


@pytest.mark.parametrize("value", [list(range(100_000)), "y" * 100_000, {f"k{i}": i for i in range(10_000)}])
def test_excerpt_long_values_are_bounded_and_sized(value: object) -> None:
    text = excerpt(value)
    assert len(text) < 120 and "…" in text and str(len(value)) in text  # type: ignore[arg-type]


def test_aliases_within_the_limit_load_and_merge_keys_are_not_duplicates() -> None:
    doc = load_yaml_document("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  <<: *b\n  y: 3\nlist: [*b, *b]\n")
    assert doc["other"] == {"x": 1, "y": 3} and doc["list"] == [{"x": 1, "y": 2}] * 2


def test_alias_expansion_past_the_limit_is_refused() -> None:
    levels = 1
    while 10 ** levels <= MAX_EXPANDED_NODES:
        levels += 1
    text = "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, levels))
    with pytest.raises(SpecError, match="alias bomb"):
        load_yaml_document(text)


def test_duplicate_keys_at_any_depth_name_both_lines() -> None:
    out = problems(HEAD + "spec:\n  kernel:\n    samples: 10\n    warmup: 1\n    samples: 20\n")
    assert out == ["(YAML) line 8: duplicate key 'samples' (first at line 6); each key may appear once in a mapping, "
                   "remove one"]


def test_oversized_document_is_refused_before_parsing() -> None:
    out = problems(HEAD + "# " + "x" * MAX_DOCUMENT_BYTES + "\n")
    assert len(out) == 1 and "byte limit" in out[0] and len(out[0]) < 300


def test_yaml_syntax_errors_and_several_documents() -> None:
    assert problems(HEAD + "spec: [\n")[0].startswith("(YAML) f.yaml, line 5, column 1:")
    assert problems(HEAD + "spec: {}\n---\n" + HEAD + "spec: {}\n") == [
        "(file): expected exactly one YAML document, found 2"]


@pytest.mark.parametrize(("text", "source", "line"), [
    ("a: [\n", "bad.yaml", "(YAML) bad.yaml, line 2, column 1: did not find expected node content (while parsing a "
     "flow node started at line 2, column 1); fix the YAML syntax there"),
    ("a: 1\n  b: 2\n", "<stdin>", "(YAML) <stdin>, line 2, column 4: mapping values are not allowed in this context; "
     "fix the YAML syntax there"),
    ('a: "open\n', "dir/exp.yaml", "(YAML) dir/exp.yaml, line 2, column 1: found unexpected end of stream (while "
     "scanning a quoted scalar started at line 1, column 4); fix the YAML syntax there"),
    ("a: *nowhere\n", "x.yaml", "(YAML) x.yaml, line 1, column 4: found undefined alias; fix the YAML syntax there"),
    ("metadata:\n\tname: x\n", "tab.yaml", "(YAML) tab.yaml, line 2, column 1: found character that cannot start "
     "any token (while scanning for the next token started at line 2, column 1); YAML indents with spaces, not tabs: "
     "replace the tab there with spaces"),
    ("a: \x07\n", "x.yaml", "(YAML) x.yaml: unacceptable character #x0007: control characters are not allowed\n"
     '  in "x.yaml", position 3'),
])
def test_yaml_syntax_errors_name_the_file_line_and_column(text: str, source: str, line: str) -> None:
    with pytest.raises(SpecError) as err:
        load_yaml_document(text, source)
    assert err.value.problems == [line] and "<unicode string>" not in str(err.value)


def test_many_problems_are_capped() -> None:
    bad = ", ".join(f"f{i}: 1" for i in range(60))  # 60 unknown fields: 60 problems
    out = problems(HEAD + f"spec:\n  kernel: {{{bad}}}\n")
    assert len(out) == MAX_PROBLEMS + 1 and out[-1] == f"… and {60 - MAX_PROBLEMS} more problems"


@pytest.mark.parametrize(("tokens", "line"), [
    ([-i for i in range(1, 35)],  # 34 bad counts: one line, the other field still shown
     "spec.sweep.tokens[0…33] (34 items): must be greater than 0: use a larger value, e.g. 1 (got -1, -2, -3, -4, "
     "-5, -6, …)"),
    ([8, -1, 16, -2],  # not contiguous: the indices are listed
     "spec.sweep.tokens[1, 3] (2 items): must be greater than 0: use a larger value, e.g. 1 (got -1, -2)"),
    ([8, -1, 16],  # one bad item: its own index
     "spec.sweep.tokens[1]: must be greater than 0: use a larger value, e.g. 1 (got -1)"),
])
def test_items_of_one_list_with_the_same_problem_share_a_line(tokens: list[int], line: str) -> None:
    out = problems(HEAD + f"spec: {{sweep: {{tokens: {tokens}}}, kernel: {{warmup: -3}}}}\n")
    assert out == [line, "spec.kernel.warmup: must be at least 0: raise it to 0 or more (got -3)"]


@pytest.mark.parametrize(("spec", "line"), [
    ("{kernel: {sampels: 10}}", "spec.kernel.sampels: unknown field; did you mean 'samples'? (fields are camelCase) "
                                "(got 10)"),
    ("{sweeep: {tokens: [8]}}", "spec.sweeep: unknown field; did you mean 'sweep'? (fields are camelCase) "
                                "(got {'tokens': [8]})"),
    ("{kernel: {gather_model: {}}}", "spec.kernel.gather_model: unknown field; did you mean 'gatherModel'? "
                                     "(fields are camelCase) (got {})"),
    ("{parallelism: {zzz: 1}}", "spec.parallelism.zzz: unknown field; remove it (this section has: "
                                "tensorParallelSize) (got 1)"),
    ("{step: {rounds: 3}}",  # a field of a nested section (it got "did you mean 'sweep'?", issue 37)
     "spec.step: unknown field here; step belongs under serving (serving.step): move it there (got {'rounds': 3})"),
])
def test_an_unknown_field_names_the_closest_known_one(spec: str, line: str) -> None:
    assert problems(HEAD + f"spec: {spec}\n") == [line]


def test_a_cross_field_rule_names_its_field_not_the_whole_spec() -> None:
    """It named ``spec`` and ended with an excerpt of the whole spec ``(got {'projection': … (7 items))`` (issue 37)."""
    out = problems(HEAD + "spec: {parallelism: {tensorParallelSize: 2}, serving: {model: m, points: [], "
                          "step: {thresholds: [1]}}}\n")
    assert len(out) == 1 and out[0].startswith("spec.serving.step.thresholds: [1] must be above the servers' TP 2")
    assert "(got" not in out[0]


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_floats_in_a_spec_are_refused(value: str) -> None:
    out = problems(HEAD + f"spec:\n  gate: {{maxAbsError: {value}}}\n")
    assert out[0].startswith("spec.gate.maxAbsError: must be a finite number")


def test_non_finite_serving_bounds_are_refused() -> None:
    out = problems(HEAD + "spec:\n  timeoutSeconds: 9600\n  serving:\n    model: m\n    gate: {maxTtftRegressionPct: .nan}\n")
    assert any("maxTtftRegressionPct" in p for p in out)


@pytest.mark.parametrize(("meta", "field"), [
    ("{name: t, namespace: Bad_NS}", "metadata.namespace"),
    ("{name: t, labels: {a/b/c: x}}", "metadata.labels"),
    ("{name: t, labels: {ok: -starts-with-dash}}", "metadata.labels.ok"),
    ("{name: t, annotations: {'not ok': x}}", "metadata.annotations"),
])
def test_metadata_is_validated_like_the_api_server(meta: str, field: str) -> None:
    text = "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\n" + f"metadata: {meta}\nspec: {{}}\n"
    assert any(p.startswith(field) for p in problems(text))


# Every pydantic error type an experiment file can reach says what is expected and how to fix it -----------


@pytest.mark.parametrize(("spec", "line"), [
    ("{sweep: {tokens: 0}}",  # list_type, with the field's own example
     "spec.sweep.tokens: must be a list of token counts, e.g. [512, 2048], not a number; put even one value in "
     "brackets: [0] (got 0)"),
    ("{serving: {model: m, extraArgs: --enforce-eager}}",
     'spec.serving.extraArgs: must be a list of strings, e.g. ["--max-model-len", "8192"], not a string; put even '
     "one value in brackets: [--enforce-eager] (got '--enforce-eager')"),
    ("{sweep: {tokens: [0, 8]}}",  # greater_than
     "spec.sweep.tokens[0]: must be greater than 0: use a larger value, e.g. 1 (got 0)"),
    ("{sweep: {refine: {bracketRelative: 0}}}",  # greater_than, a float bound
     "spec.sweep.refine.bracketRelative: must be greater than 0.0: use a larger value (got 0)"),
    ("{kernel: {samples: 1}}",  # greater_than_equal
     "spec.kernel.samples: must be at least 5: raise it to 5 or more (got 1)"),
    ("{kernel: {samples: 100000}}",  # less_than_equal
     "spec.kernel.samples: must be at most 10000: lower it to 10000 or less (got 100000)"),
    ("{kernel: 5}",  # model_type
     "spec.kernel: must be a mapping of key: value fields (indented lines, or {key: value}), not a number (got 5)"),
    ("{resources: {nodeSelector: gpu}}",  # dict_type
     "spec.resources.nodeSelector: must be a mapping of key: value fields (indented lines, or {key: value}), "
     "not a string (got 'gpu')"),
    ("{serving: {model: 7}}",  # string_type
     'spec.serving.model: must be a string, not a number: quote it, e.g. "7" (got 7)'),
    ("{kernel: {l2Flush: 'false'}}",  # bool_type
     "spec.kernel.l2Flush: must be true or false (a string here: write it without quotes or a !!str tag) "
     "(got 'false')"),
    ("{kernel: {gatherModel: {hostUs: fast}}}",  # float_type
     "spec.kernel.gatherModel.hostUs: must be a number, e.g. 1.5 (got 'fast')"),
    ("{kernel: {gatherModel: {hostUs: 1e309}}}",  # float_parsing: nobody quoted it, YAML read it as text
     "spec.kernel.gatherModel.hostUs: must be a number, e.g. 1.5 (YAML read 1e309 as text: it is beyond the largest "
     "64-bit floating-point number, about 1.8e308) (got '1e309')"),
    ("{gate: {thresholdTokens: 0o40}}",  # int_type: YAML 1.2's octal prefix is text to YAML 1.1
     "spec.gate.thresholdTokens: must be a whole number (an integer count, e.g. 2048) (YAML read 0o40 as text: 0o is "
     "YAML 1.2's octal prefix and YAML 1.1 has none; write 32) (got '0o40')"),
    ("{gate: {thresholdTokens: 1.5e0}}",  # 1.5e0 is the number 1.5 (as Kubernetes reads it), not text
     "spec.gate.thresholdTokens: must be a whole number (an integer count, e.g. 2048) (got 1.5)"),
    ("{gate: {thresholdTokens: '2048'}}",  # int_type
     "spec.gate.thresholdTokens: must be a whole number (an integer count, e.g. 2048) (a string here: write it "
     "without quotes or a !!str tag) (got '2048')"),
    ("{gate: {thresholdTokens: !!str 2048}}",  # a tag, not quotes (issue 37: "unquoted" was the wrong advice)
     "spec.gate.thresholdTokens: must be a whole number (an integer count, e.g. 2048) (a string here: write it "
     "without quotes or a !!str tag) (got '2048')"),
    ("{serving: {model: m, points: [], step: {indifferenceMs: .nan}}}",  # NaN fails every bound: "lower it to …" was wrong
     "spec.serving.step.indifferenceMs: must be a number of at most 1000.0, not .nan (not a number): give one, or "
     "leave the field out (got nan)"),
    ("{serving: {}}",  # missing
     "spec.serving.model: required: add it (got {})"),
    ("{image: ''}",  # string_too_short
     "spec.image: must not be empty: give a value or leave the field out (got '')"),
    ("{serving: {model: " + "m" * 600 + "}}",  # string_too_long
     "spec.serving.model: must have at most 512 characters: shorten it (got '" + "m" * 78 + "… (600 characters))"),
    ("{projection: {outputSizes: []}}",  # too_short
     "spec.projection.outputSizes: must have at least 1 item, has 0: add one (got [])"),
    ("{sweep: {tokens: [" + ", ".join(str(i) for i in range(1, 71)) + "]}}",  # too_long
     "spec.sweep.tokens: must have at most 64 items, has 70: remove some (got " + excerpt(list(range(1, 71))) + ")"),
    ("{kernel: {timer: fast}}",  # literal_error
     "spec.kernel.timer: must be one of: 'auto', 'cupti', 'cuda-events' or 'host' (check the spelling and case) "
     "(got 'fast')"),
])
def test_each_error_type_says_what_is_expected_and_how_to_fix_it(spec: str, line: str) -> None:
    assert problems(HEAD + f"spec: {spec}\n") == [line]


@pytest.mark.parametrize("text", ["1.5e0", "1.5E0", ".15e1", "+1.5e0"])
def test_an_exponent_without_a_sign_is_a_number_as_kubernetes_reads_it(text: str) -> None:
    """YAML 1.1 (PyYAML) wants ``1.5e+0``; YAML 1.2 and Kubernetes (go-yaml) read ``1.5e0`` as 1.5: so does spx."""
    exp = load_experiment(HEAD + f"spec: {{gate: {{minSpeedupAtOrAboveThreshold: {text}}}}}\n")
    assert exp.spec.gate.min_speedup_at_or_above_threshold == 1.5


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class _Shapes(BaseModel):
    """Constraints no experiment field has yet: their messages are still written out."""

    model_config = ConfigDict(strict=True)
    below: int = Field(default=0, lt=10)
    colour: Colour = Colour.RED


@pytest.mark.parametrize(("doc", "line"), [
    ({"below": 10}, "below: must be less than 10: use a smaller value (got 10)"),
    ({"colour": "green"}, "colour: must be one of: 'red' or 'blue' (check the spelling and case) (got 'green')"),
])
def test_error_types_no_experiment_field_reaches_yet(doc: dict[str, object], line: str) -> None:
    with pytest.raises(ValidationError) as err:
        _Shapes.model_validate(doc, strict=False)
    assert describe_validation_error(err.value) == [line]


def test_an_empty_section_names_its_required_fields() -> None:
    doc = "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\nmetadata:\nspec: {}\n"
    assert problems(doc) == [
        "metadata: is empty: give its fields as indented lines under it; required: name (e.g. name: …) (got None)"]
