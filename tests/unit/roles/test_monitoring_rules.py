# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The monitoring role's Prometheus rules and configuration, checked by promtool (from
Debian's package, see promtool_support) and unit-tested with ``promtool test rules``."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from promtool_support import amtool, promtool, role_defaults, rule_settings

from unit_support import REPO_ROOT

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import _monitoring

RULES_TEST = REPO_ROOT / "tests" / "unit" / "roles" / "monitoring" / "rules_test.yml"


def config_settings(rules_file):
    defaults = role_defaults()
    nodes = [{"host": "spark%d" % n, "address": "10.0.0.%d" % n, "rank": n - 1} for n in range(1, 5)]
    return {
        "scrape_interval": defaults["monitoring_scrape_interval"],
        "scrape_timeout": defaults["monitoring_scrape_timeout"],
        "evaluation_interval": defaults["monitoring_evaluation_interval"],
        "rules_file": str(rules_file),
        "nodes": nodes,
        "heads": nodes[:1],
        "exporter_port": defaults["monitoring_node_exporter_port"],
        "engine_port": 8000,
        "extra_scrape_configs": [],
    }


def run(*argv):
    return subprocess.run([str(promtool()), *argv], capture_output=True, text=True, check=False)


@pytest.fixture
def rendered(tmp_path):
    rules = tmp_path / "dgxspark-rules.yml"
    rules.write_text(yaml.safe_dump(_monitoring.prometheus_rules(rule_settings()), sort_keys=False, width=1000))
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_monitoring.prometheus_config(config_settings(rules)), sort_keys=False))
    return tmp_path


def test_promtool_checks_the_rules_and_the_configuration(rendered):
    result = run("check", "rules", str(rendered / "dgxspark-rules.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 15 rules found" in result.stdout + result.stderr
    result = run("check", "config", str(rendered / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rules_pass_their_unit_tests(rendered):
    shutil.copy(RULES_TEST, rendered / "rules_test.yml")
    result = run("test", "rules", str(rendered / "rules_test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_unit_tests_fail_on_a_broken_alert(rendered):
    # A wedge rule that forgot the running requests fires on the idle replica too.
    rules = _monitoring.prometheus_rules(rule_settings())
    for rule in rules["groups"][1]["rules"]:
        if rule["alert"] == "DgxsparkEngineWedged":
            rule["expr"] = rule["expr"].split(" and on")[0]
    (rendered / "dgxspark-rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False, width=1000))
    shutil.copy(RULES_TEST, rendered / "rules_test.yml")
    result = run("test", "rules", str(rendered / "rules_test.yml"))
    assert result.returncode != 0
    assert "DgxsparkEngineWedged" in result.stdout + result.stderr


def test_promtool_refuses_a_config_whose_timeout_exceeds_the_interval(tmp_path):
    rules = tmp_path / "dgxspark-rules.yml"
    rules.write_text(yaml.safe_dump(_monitoring.prometheus_rules(rule_settings())))
    settings = dict(config_settings(rules), scrape_interval="5s", scrape_timeout="10s")
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_monitoring.prometheus_config(settings)))
    result = run("check", "config", str(config))
    assert result.returncode != 0
    assert "scrape timeout greater than scrape interval" in result.stdout + result.stderr


def test_every_alert_is_listed():
    rules = _monitoring.prometheus_rules(rule_settings())
    assert [rule["alert"] for rule in rules["groups"][1]["rules"]] == list(_monitoring.ALERTS)


def test_amtool_accepts_the_alertmanager_configuration_and_refuses_a_broken_one(tmp_path):
    defaults = role_defaults()
    settings = {"webhook_urls": ["http://192.0.2.9:5001/alerts"], "email_to": "ops@example.org",
                "email_from": "spark@example.org", "email_smarthost": "mail.example.org:587",
                "email_require_tls": defaults["monitoring_alert_email_require_tls"]}
    settings.update({key: defaults["monitoring_" + key]
                     for key in ("alert_group_wait", "alert_group_interval", "alert_repeat_interval")})
    config = _monitoring.alertmanager_config(settings)
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = subprocess.run([str(amtool()), "check-config", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Found:" in result.stdout and " - 1 receivers" in result.stdout, result.stdout
    # A route to a receiver the file lacks: amtool must say no, or the check above proves nothing.
    config["route"]["receiver"] = "nobody"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = subprocess.run([str(amtool()), "check-config", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "nobody" in result.stdout + result.stderr, result.stdout + result.stderr


def test_promtool_accepts_the_configuration_with_an_alertmanager(tmp_path):
    rules = tmp_path / "dgxspark-rules.yml"
    rules.write_text(yaml.safe_dump(_monitoring.prometheus_rules(rule_settings())))
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_monitoring.prometheus_config(dict(config_settings(rules), alertmanager="127.0.0.1:9093"))))
    result = run("check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
