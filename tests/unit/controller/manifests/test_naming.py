"""spx.controller.manifests.naming: the names and label values of the operator's children are bounded,
deterministic and never shared between experiments."""

from __future__ import annotations

import re

import pytest

from spx.controller.manifests import naming

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    ("name", "generation", "expected"),
    [
        ("ds-v41-h200", 1, "ds-v41-h200-g1"),
        ("ds-v41-h200", 12, "ds-v41-h200-g12"),
        ("a", 7, "a-g7"),
    ],
)
def test_job_name_is_name_and_generation(name: str, generation: int, expected: str) -> None:
    assert naming.job_name(name, generation) == expected


@pytest.mark.parametrize("name", ["x" * 63, "a" * 200, "my.dotted.experiment", "a" * 57 + "-tail", "ends-with-dash-" + "b" * 60])
@pytest.mark.parametrize("generation", [1, 123456789])
def test_job_name_is_a_bounded_dns_label(name: str, generation: int) -> None:
    out = naming.job_name(name, generation)
    assert len(out) <= 63
    assert DNS_LABEL.match(out), out
    assert out.endswith(f"-g{generation}")
    assert naming.job_name(name, generation) == out  # deterministic


def test_long_names_do_not_collide() -> None:
    a, b = "x" * 100 + "a", "x" * 100 + "b"
    assert naming.job_name(a, 1) != naming.job_name(b, 1)
    assert naming.job_name("a.b", 1) != naming.job_name("a-b", 1)


def test_label_value_of_long_names_is_bounded() -> None:
    assert naming.experiment_label_value("short") == "short"
    long = naming.experiment_label_value("y" * 200)
    assert len(long) <= 63 and long != naming.experiment_label_value("y" * 199)


def test_the_result_configmap_is_named_after_its_job() -> None:
    assert naming.result_configmap_name("ds-v41-h200", 3) == "ds-v41-h200-g3-result"
