"""spx.api.loading: the bounded problem list counts what it leaves out, and never hides a field behind another's many problems."""

from __future__ import annotations

import pytest

from spx.api.loading import MAX_PROBLEMS, SpecError, load_experiment

HEAD = "apiVersion: bench.spx.dev/v1alpha1\nkind: ShardedProjectionExperiment\n"


def _problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_experiment(text)
    return err.value.problems


def test_forty_bad_labels_and_a_bad_samples() -> None:
    labels = ", ".join(f"'bad key {i}': x" for i in range(40))
    problems = _problems(HEAD + f"metadata: {{name: t, labels: {{{labels}}}}}\nspec: {{kernel: {{samples: 1}}}}\n")
    shown, more = problems[:-1], problems[-1]
    assert len(shown) == MAX_PROBLEMS
    assert any(p.startswith("spec.kernel.samples") for p in shown), shown  # not hidden behind the labels
    label_lines = [p for p in shown if p.startswith("metadata.labels")]
    assert more == f"… and {40 - len(label_lines)} more problems"  # 41 problems in all


def test_many_bad_token_counts_share_one_line() -> None:
    tokens = ", ".join(["-1"] * 30)
    problems = _problems(HEAD + f"metadata: {{name: t}}\nspec: {{sweep: {{tokens: [{tokens}]}}}}\n")
    assert problems == ["spec.sweep.tokens[0…29] (30 items): must be greater than 0: use a larger value, e.g. 1 "
                        "(got -1, -1, -1, -1, -1, -1, …)"]


def test_many_problems_are_counted_exactly() -> None:
    fields = ", ".join(f"f{i}: 1" for i in range(30))
    problems = _problems(HEAD + f"metadata: {{name: t}}\nspec: {{kernel: {{{fields}}}}}\n")
    assert problems[-1] == f"… and {30 - MAX_PROBLEMS} more problems"
    assert len(problems) == MAX_PROBLEMS + 1


def test_exactly_the_limit_is_listed_whole() -> None:
    fields = ", ".join(f"f{i}: 1" for i in range(MAX_PROBLEMS))
    problems = _problems(HEAD + f"metadata: {{name: t}}\nspec: {{kernel: {{{fields}}}}}\n")
    assert len(problems) == MAX_PROBLEMS and not problems[-1].startswith("…")
