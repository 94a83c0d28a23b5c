# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.filter.node_software import plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._monitoring import (
    MonitoringError,
    alertmanager_config,
    metrics_readers,
    monitoring_servers,
    prometheus_config,
    prometheus_rules,
    query_url,
    scrape_report,
)


def _config(settings):
    return prometheus_config(plain(settings))


def _alertmanager(settings):
    return alertmanager_config(plain(settings))


def _rules(settings):
    return prometheus_rules(plain(settings))


def _servers(groups, server_group="monitoring", node_group="dgxspark_cluster"):
    return monitoring_servers(plain(groups), server_group, node_group)


def _readers(groups, hostvars, server_group="monitoring", node_group="dgxspark_cluster"):
    return metrics_readers(plain(groups), hostvars, server_group, node_group)


class FilterModule:
    def filters(self):
        return {
            "monitoring_alertmanager_config": as_filter(_alertmanager, MonitoringError),
            "monitoring_metrics_readers": as_filter(_readers, MonitoringError),
            "monitoring_servers": as_filter(_servers, MonitoringError),
            "monitoring_prometheus_config": as_filter(_config, MonitoringError),
            "monitoring_prometheus_rules": as_filter(_rules, MonitoringError),
            "monitoring_query_url": as_filter(query_url, MonitoringError),
            "monitoring_scrape_report": as_filter(scrape_report, MonitoringError),
        }
