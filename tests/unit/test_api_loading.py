"""spx.api.loading: defensive YAML (size, alias expansion, duplicate keys) and bounded messages."""

from __future__ import annotations

import pytest

from spx.api import SpecError, load_experiment
from spx.api.loading import MAX_DOCUMENT_BYTES, MAX_EXPANDED_NODES, MAX_PROBLEMS, excerpt, load_yaml_document

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
    assert problems(HEAD + "spec: [\n")[0].startswith("(YAML):")
    assert problems(HEAD + "spec: {}\n---\n" + HEAD + "spec: {}\n") == [
        "(file): expected exactly one YAML document, found 2"]


def test_many_problems_are_capped() -> None:
    bad = ", ".join(f'"{i}"' for i in range(60))  # 60 strings where counts belong: 60 errors
    out = problems(HEAD + f"spec:\n  sweep: {{tokens: [{bad}]}}\n")
    assert len(out) == MAX_PROBLEMS + 1 and out[-1].startswith("… and ")


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
