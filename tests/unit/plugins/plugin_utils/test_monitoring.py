# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus configuration, the query URL and status.yml's report (the rules themselves
are checked by promtool in tests/unit/roles/test_monitoring_rules.py)."""

from __future__ import annotations

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
