# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus configuration, the query URL and status.yml's report (the rules themselves
are checked by promtool in tests/unit/roles/test_monitoring_rules.py)."""

from __future__ import annotations

import re

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import _monitoring as mon

NODES = [{"host": "spark%d" % n, "address": "10.0.0.%d" % n, "rank": n - 1} for n in range(1, 5)]


def settings(**overrides):
    base = {"scrape_interval": "15s", "scrape_timeout": "10s", "evaluation_interval": "15s",
            "rules_file": "/etc/prometheus/dgxspark-rules.yml", "nodes": NODES, "heads": NODES[:1],
            "exporter_port": 9100, "engine_port": "8000", "extra_scrape_configs": []}
    base.update(overrides)
    return base


def test_every_node_and_each_head_directly():
    config = mon.prometheus_config(settings())
    node, vllm = config["scrape_configs"]
    assert [c["targets"] for c in node["static_configs"]] == [["10.0.0.%d:9100" % n] for n in range(1, 5)]
    assert node["static_configs"][1]["labels"] == {"host": "spark2", "rank": "1"}
    assert vllm["static_configs"] == [{"targets": ["10.0.0.1:8000"],
                                       "labels": {"host": "spark1", "rank": "0", "replica": "spark1"}}]
    assert config["rule_files"] == ["/etc/prometheus/dgxspark-rules.yml"]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"heads": []}, "no engine head to scrape"),
    ({"nodes": []}, "no node to scrape"),
    ({"scrape_interval": "15"}, "monitoring_scrape_interval is '15'; expected a Prometheus duration"),
])
def test_bad_settings_are_named(overrides, message):
    with pytest.raises(mon.MonitoringError, match=message):
        mon.prometheus_config(settings(**overrides))


@pytest.mark.parametrize(("listen", "url"), [
    ("0.0.0.0:9090", "http://127.0.0.1:9090"), (":9090", "http://127.0.0.1:9090"),
    ("10.0.0.5:9091", "http://10.0.0.5:9091"), ("[::]:9090", "http://[::1]:9090"),
])
def test_query_url(listen, url):
    assert mon.query_url(listen) == url


def test_query_url_refuses_a_listen_address_without_port():
    with pytest.raises(mon.MonitoringError, match="expected HOST:PORT"):
        mon.query_url("0.0.0.0")


def test_scrape_report_names_each_rank_and_the_firing_alerts():
    targets = {"data": {"activeTargets": [
        {"labels": {"job": "node", "host": "spark2", "rank": "1"}, "scrapeUrl": "http://10.0.0.2:9100/metrics",
         "health": "down", "lastScrape": "2026-01-01T00:00:01Z", "lastError": "connection refused"},
        {"labels": {"job": "node", "host": "spark1", "rank": "0"}, "scrapeUrl": "http://10.0.0.1:9100/metrics",
         "health": "up", "lastScrape": "2026-01-01T00:00:02Z", "lastError": ""},
    ]}}
    alerts = {"data": {"alerts": [
        {"labels": {"alertname": "DgxsparkNodeDown", "host": "spark2", "severity": "critical"}, "state": "firing",
         "activeAt": "2026-01-01T00:00:00Z", "annotations": {"summary": "A node's exporter does not answer."}},
        {"labels": {"alertname": "DgxsparkKvCacheFull", "host": "spark1"}, "state": "pending"},
    ]}}
    assert mon.scrape_report(targets, alerts) == [
        "spark1 rank 0 (node, http://10.0.0.1:9100/metrics): up, last scrape 2026-01-01T00:00:02Z",
        "spark2 rank 1 (node, http://10.0.0.2:9100/metrics): down, last scrape 2026-01-01T00:00:01Z; connection refused",
        "FIRING DgxsparkNodeDown (host=spark2) since 2026-01-01T00:00:00Z: A node's exporter does not answer.",
    ]
    assert mon.scrape_report(targets, {"data": {"alerts": []}})[-1] == "no alert is firing"


def alerting(**overrides):
    base = {"webhook_urls": [], "email_to": "", "email_from": "", "email_smarthost": "", "email_require_tls": True,
            "alert_group_wait": "30s", "alert_group_interval": "5m", "alert_repeat_interval": "4h"}
    base.update(overrides)
    return base


def test_alerts_go_to_alertmanager_only_when_one_is_named():
    assert "alerting" not in mon.prometheus_config(settings())
    assert "alerting" not in mon.prometheus_config(settings(alertmanager=""))
    config = mon.prometheus_config(settings(alertmanager="127.0.0.1:9093"))
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]}


def test_every_webhook_and_the_mail_address_get_each_alert_and_its_resolution():
    config = mon.alertmanager_config(alerting(
        webhook_urls=["http://10.0.0.9:5001/alerts", "https://hooks.example.org/x"], email_to="ops@example.org",
        email_from="spark@example.org", email_smarthost="mail.example.org:587", alert_group_wait="1s"))
    assert config["route"] == {"receiver": "dgxspark", "group_by": ["alertname", "host"], "group_wait": "1s",
                               "group_interval": "5m", "repeat_interval": "4h"}
    (receiver,) = config["receivers"]
    assert receiver["webhook_configs"] == [{"url": "http://10.0.0.9:5001/alerts", "send_resolved": True},
                                           {"url": "https://hooks.example.org/x", "send_resolved": True}]
    assert receiver["email_configs"] == [{"to": "ops@example.org", "from": "spark@example.org",
                                          "smarthost": "mail.example.org:587", "require_tls": True,
                                          "send_resolved": True}]
    assert "email_configs" not in mon.alertmanager_config(alerting(webhook_urls=["http://10.0.0.9:5001/"]))["receivers"][0]


@pytest.mark.parametrize("overrides, expected", [
    ({}, "no alert receiver: set monitoring_alert_webhook_urls or monitoring_alert_email_to"),
    ({"webhook_urls": ["10.0.0.9:5001/alerts"]}, "monitoring_alert_webhook_urls holds '10.0.0.9:5001/alerts'; "
                                                 "expected an http:// or https:// URL"),
    ({"webhook_urls": "http://10.0.0.9/"}, "monitoring_alert_webhook_urls is 'http://10.0.0.9/'; expected a list"),
    ({"email_to": "ops@example.org", "email_smarthost": "mail.example.org:25"},
     "monitoring_alert_email_from is ''; with monitoring_alert_email_to set, expected the sender's address"),
    ({"email_to": "ops@example.org", "email_from": "a@b.org", "email_smarthost": "mail.example.org"},
     "monitoring_alert_email_smarthost is 'mail.example.org'; with monitoring_alert_email_to set, expected HOST:PORT"),
    ({"webhook_urls": ["http://10.0.0.9/"], "alert_group_wait": "soon"},
     "monitoring_alert_group_wait is 'soon'; expected a Prometheus duration"),
])
def test_a_receiver_or_timing_that_cannot_work_is_refused_naming_the_variable(overrides, expected):
    with pytest.raises(mon.MonitoringError, match=re.escape(expected)):
        mon.alertmanager_config(alerting(**overrides))


def test_prometheus_runs_on_the_monitoring_group_else_on_the_first_node():
    assert mon.monitoring_servers({"monitoring": ["mon1"], "dgxspark_cluster": ["spark1", "spark2"]}) == ["mon1"]
    assert mon.monitoring_servers({"monitoring": [], "dgxspark_cluster": ["spark1", "spark2"]}) == ["spark1"]
    assert mon.monitoring_servers({"dgxspark_cluster": ["spark1"]}, "prometheus", "dgxspark_cluster") == ["spark1"]
    assert mon.monitoring_servers({}) == []
    with pytest.raises(mon.MonitoringError, match="groups"):
        mon.monitoring_servers(["spark1"])


def test_the_metrics_readers_are_the_prometheus_hosts_by_their_ansible_host_else_their_name():
    groups = {"monitoring": ["mon1", "mon2"], "dgxspark_cluster": ["spark1"]}
    hostvars = {"mon1": {"ansible_host": "10.10.0.5"}, "mon2": {}, "spark1": {"ansible_host": "10.10.0.11"}}
    assert mon.metrics_readers(groups, hostvars) == ["10.10.0.5", "mon2"]
    assert mon.metrics_readers({"dgxspark_cluster": ["spark1"]}, hostvars) == ["10.10.0.11"]
