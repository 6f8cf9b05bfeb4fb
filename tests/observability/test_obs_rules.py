"""The chart's alert rules (charts/spx-operator/rules/spx-rules.yaml) with promtool (Debian
`prometheus` 2.42): `check rules`, and `test rules` with firing and silent cases per alert
(spx-rules.test.yaml); every metric they read is one the operator exports."""

from __future__ import annotations

import subprocess

import yaml

from spx_testing.obslib import RULES, RULES_TEST, SYNTHETIC, metric_names, registry_series_names, require_binary

ALERTS = {
    "SpxGateFailed",
    "SpxServingGateFailed",
    "SpxAccuracyDropped",
    "SpxExperimentFailed",
    "SpxExperimentStuck",
    "SpxOperatorDown",
    "SpxOperatorAbsent",
    "SpxOperatorNotReconciling",
    "SpxCrossoverShifted",
}


def _rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_check_rules() -> None:
    promtool = require_binary("promtool")
    proc = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_unit_tests_pass() -> None:
    promtool = require_binary("promtool")
    proc = subprocess.run([promtool, "test", "rules", str(RULES_TEST)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_required_alerts_exist() -> None:
    assert {r["alert"] for r in _rules() if "alert" in r} == ALERTS


def test_every_alert_has_firing_and_silent_cases() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test") or []:
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    assert firing == ALERTS, ALERTS - firing
    assert silent == ALERTS, ALERTS - silent


def test_rules_read_only_metrics_the_operator_exports() -> None:
    exported = registry_series_names()
    recorded = {r["record"] for r in _rules() if "record" in r}
    for rule in _rules():
        unknown = metric_names(str(rule["expr"])) - exported - recorded - SYNTHETIC
        assert not unknown, f"{rule.get('alert') or rule.get('record')} reads {unknown}, not in spx.controller.metrics.REGISTRY"


def test_alerts_carry_severity_and_a_summary() -> None:
    for rule in _rules():
        if "alert" in rule:
            assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_runbook_links_resolve_at_the_chart_s_version() -> None:
    """Every runbook_url is docs/runbooks/<Alert>.md at the tag of the chart's version (v<version>, the
    tag scripts/release.sh creates), and that file exists in the repository and names the alert."""
    from spx_testing.obslib import CHART, ROOT

    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    for rule in _rules():
        if "alert" not in rule:
            continue
        url = rule["annotations"]["runbook_url"]
        assert url == f"https://github.com/spx-dev/spx/blob/v{version}/docs/runbooks/{rule['alert']}.md", url
        page = ROOT / url.split(f"/blob/v{version}/", 1)[1]
        assert page.is_file() and rule["alert"] in page.read_text(), page
