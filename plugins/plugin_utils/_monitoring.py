# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus's configuration and rules for the cluster, as plain data.

The monitoring role renders both with ``to_nice_yaml``; the unit tests check them with
``promtool check`` and ``promtool test rules`` (tests/unit/roles/test_monitoring_rules.py).
"""

from __future__ import annotations

import re

_DURATION_RE = re.compile(r"\A([0-9]+(ms|s|m|h|d|w|y))+\Z")
_LABEL_RE = re.compile(r"\A[a-zA-Z_][a-zA-Z0-9_]*\Z")

RULES_GROUP_RECORDING = "dgxspark-recording"
RULES_GROUP_ALERTS = "dgxspark-alerts"

# Every alert the rules hold, for the README, status.yml and the tests.
ALERTS = (
    "DgxsparkEngineWedged",
    "DgxsparkEngineReplicaDown",
    "DgxsparkEngineRankDown",
    "DgxsparkNodeDown",
    "DgxsparkNodeMetricsStale",
    "DgxsparkFabricErrorsIncreasing",
    "DgxsparkFabricLinkDegraded",
    "DgxsparkKvCacheFull",
    "DgxsparkNodeMemoryLow",
)


class MonitoringError(ValueError):
    pass


def _duration(settings, key):
    value = str(settings[key])
    if not _DURATION_RE.match(value):
        raise MonitoringError(
            "monitoring_%s is %r; expected a Prometheus duration such as 30s, 2m or 1h" % (key, value)
        )
    return value


def _regex(names):
    return "|".join(re.escape(str(name)) for name in names)


def _target_labels(target, keys):
    labels = {}
    for key in keys:
        if target.get(key) is not None:
            labels[key] = str(target[key])
    return labels


def prometheus_config(settings):
    """The prometheus.yml of the cluster.

    O(settings): scrape_interval, scrape_timeout, evaluation_interval, rules_file,
    nodes ([{host, address, rank}]), exporter_port, heads ([{host, address, rank}]),
    engine_port, extra_scrape_configs (list), alertmanager (HOST:PORT Prometheus sends
    its alerts to, empty or absent for none)."""
    nodes = list(settings.get("nodes") or [])
    heads = list(settings.get("heads") or [])
    if not nodes:
        raise MonitoringError("no node to scrape: the group of engine hosts is empty")
    if not heads:
        raise MonitoringError(
            "no engine head to scrape: no host has engine_service_is_head (run the engine play first) "
            "or engine_service_rank 0"
        )
    node_targets = [
        {"targets": ["%s:%d" % (node["address"], int(settings["exporter_port"]))],
         "labels": _target_labels(node, ("host", "rank"))}
        for node in nodes
    ]
    # Each head's engine directly, never through a balancer: a balancer in front
    # of several replicas would mix their counters into phantom series.
    head_targets = [
        {"targets": ["%s:%d" % (head["address"], int(settings["engine_port"]))],
         "labels": dict(_target_labels(head, ("host", "rank")), replica=str(head["host"]))}
        for head in heads
    ]
    config = {
        "global": {
            "scrape_interval": _duration(settings, "scrape_interval"),
            "scrape_timeout": _duration(settings, "scrape_timeout"),
            "evaluation_interval": _duration(settings, "evaluation_interval"),
        },
        "rule_files": [settings["rules_file"]],
        "scrape_configs": [
            {"job_name": "node", "static_configs": node_targets},
            {"job_name": "vllm", "metrics_path": "/metrics", "static_configs": head_targets},
        ] + list(settings.get("extra_scrape_configs") or []),
    }
    if settings.get("alertmanager"):
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [str(settings["alertmanager"])]}]}]}
    return config


_SMARTHOST_RE = re.compile(r"\A(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}\Z")


def alertmanager_config(settings):
    """The alertmanager.yml that sends every alert of the cluster to the inventory's receivers.

    O(settings): webhook_urls (list of http(s) URLs), email_to, email_from, email_smarthost
    (HOST:PORT of the mail relay), email_require_tls (bool), alert_group_wait,
    alert_group_interval, alert_repeat_interval (Prometheus durations). Each firing alert and
    its resolution is sent, grouped by alert name and host. MonitoringError names the
    variable, what it holds and what it should. (Whether Alertmanager runs at all, a receiver
    being set, is the role's monitoring_alerting.)"""
    problems = []
    urls = settings.get("webhook_urls") or []
    if not isinstance(urls, list):
        problems.append("monitoring_alert_webhook_urls is %r; expected a list of http:// or https:// URLs" % (urls,))
        urls = []
    for url in urls:
        if not isinstance(url, str) or not re.match(r"\Ahttps?://[^/\s]+(/\S*)?\Z", url):
            problems.append("monitoring_alert_webhook_urls holds %r; expected an http:// or https:// URL such as "
                            "http://10.0.0.9:5001/alerts" % (url,))
    email_to = str(settings.get("email_to") or "").strip()
    email = None
    if email_to:
        email_from = str(settings.get("email_from") or "").strip()
        smarthost = str(settings.get("email_smarthost") or "").strip()
        if "@" not in email_from:
            problems.append("monitoring_alert_email_from is %r; with monitoring_alert_email_to set, expected the "
                            "sender's address, e.g. alerts@example.org" % (email_from,))
        if not _SMARTHOST_RE.match(smarthost):
            problems.append("monitoring_alert_email_smarthost is %r; with monitoring_alert_email_to set, expected "
                            "HOST:PORT of the mail relay, e.g. mail.example.org:587" % (smarthost,))
        email = {"to": email_to, "from": email_from, "smarthost": smarthost,
                 "require_tls": bool(settings.get("email_require_tls", True)), "send_resolved": True}
    if not urls and email is None and not problems:
        problems.append("no alert receiver: set monitoring_alert_webhook_urls or monitoring_alert_email_to")
    timing = {}
    for key in ("group_wait", "group_interval", "repeat_interval"):
        try:
            timing[key] = _duration(settings, "alert_" + key)
        except MonitoringError as exc:
            problems.append(str(exc))
    if problems:
        raise MonitoringError("; ".join(problems))
    receiver = {"name": "dgxspark"}
    if urls:
        receiver["webhook_configs"] = [{"url": url, "send_resolved": True} for url in urls]
    if email is not None:
        receiver["email_configs"] = [email]
    return {
        "route": dict({"receiver": "dgxspark", "group_by": ["alertname", "host"]}, **timing),
        "receivers": [receiver],
    }


def prometheus_rules(settings):
    """The recording and alert rules.

    O(settings): rate_window, wedge_window, wedge_for, down_for, metrics_stale_after,
    nic_error_window, nic_error_for, nic_error_counters, nic_error_hw_counters,
    kv_cache_threshold, kv_cache_for, memory_available_ratio, memory_for, link_for,
    engine_unit."""
    window = _duration(settings, "rate_window")
    wedge_window = _duration(settings, "wedge_window")
    nic_window = _duration(settings, "nic_error_window")
    kv_threshold = float(settings["kv_cache_threshold"])
    memory_ratio = float(settings["memory_available_ratio"])
    if not 0 < kv_threshold <= 1:
        raise MonitoringError("monitoring_kv_cache_threshold is %r; expected a fraction above 0, at most 1" % kv_threshold)
    if not 0 < memory_ratio < 1:
        raise MonitoringError("monitoring_memory_available_ratio is %r; expected a fraction between 0 and 1" % memory_ratio)
    by = "replica, host"
    recording = [
        {"record": "dgxspark:vllm_generation_tokens:rate",
         "expr": "sum by (%s) (rate(vllm:generation_tokens_total[%s]))" % (by, window)},
        {"record": "dgxspark:vllm_prompt_tokens:rate",
         "expr": "sum by (%s) (rate(vllm:prompt_tokens_total[%s]))" % (by, window)},
        {"record": "dgxspark:vllm_spec_decode_acceptance:ratio",
         "expr": "sum by (%s) (rate(vllm:spec_decode_num_accepted_tokens_total[%s]))"
                 " / sum by (%s) (rate(vllm:spec_decode_num_draft_tokens_total[%s]))" % (by, window, by, window)},
        # As vLLM defines it: the drafted position that is always kept, plus the
        # accepted draft tokens per draft.
        {"record": "dgxspark:vllm_spec_decode_mean_accepted_length:ratio",
         "expr": "1 + sum by (%s) (rate(vllm:spec_decode_num_accepted_tokens_total[%s]))"
                 " / sum by (%s) (rate(vllm:spec_decode_num_drafts_total[%s]))" % (by, window, by, window)},
        {"record": "dgxspark:vllm_prefix_cache_hit:ratio",
         "expr": "sum by (%s) (rate(vllm:prefix_cache_hits_total[%s]))"
                 " / sum by (%s) (rate(vllm:prefix_cache_queries_total[%s]))" % (by, window, by, window)},
        {"record": "dgxspark:vllm_kv_cache_usage:ratio",
         "expr": "max by (%s) (vllm:kv_cache_usage_perc)" % by},
    ]
    port_counters = _regex(settings["nic_error_counters"])
    hw_counters = _regex(settings["nic_error_hw_counters"])
    engine_unit = str(settings["engine_unit"])
    alerts = [
        {"alert": "DgxsparkEngineWedged",
         "expr": "(sum by (%s) (increase(vllm:generation_tokens_total[%s])) == 0)"
                 " and on (%s) (sum by (%s) (vllm:num_requests_running) > 0)" % (by, wedge_window, by, by),
         "for": _duration(settings, "wedge_for"),
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "The engine holds running requests but generates no token.",
             "description": "vllm:generation_tokens_total has not moved for %s while vllm:num_requests_running > 0 "
                            "on the replica headed by the host label (the engine is wedged: /health may still "
                            "answer 200). Look at every rank's journal, then restart the cluster with "
                            "playbooks/restart.yml -e engine_service_restart=true." % wedge_window}},
        {"alert": "DgxsparkEngineReplicaDown",
         "expr": 'up{job="vllm"} == 0',
         "for": _duration(settings, "down_for"),
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "A replica's head does not answer /metrics.",
             "description": "The API server of the replica headed by the host label cannot be scraped: the "
                            "replica serves nothing. playbooks/status.yml names the rank that is down; "
                            "playbooks/site.yml starts it again."}},
        {"alert": "DgxsparkEngineRankDown",
         "expr": 'dgxspark_unit_active{unit="%s"} == 0' % engine_unit,
         "for": _duration(settings, "down_for"),
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "An engine rank's unit is not active.",
             "description": "%s is not active on the host label's node: with one rank gone its whole "
                            "tensor-parallel replica is down. playbooks/status.yml says why; playbooks/site.yml "
                            "starts every rank again." % engine_unit}},
        {"alert": "DgxsparkNodeDown",
         "expr": 'up{job="node"} == 0',
         "for": _duration(settings, "down_for"),
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "A node's exporter does not answer.",
             "description": "prometheus-node-exporter on the host label's node cannot be scraped: the node "
                            "is down, unreachable, or the exporter stopped. Try SSH to the node."}},
        {"alert": "DgxsparkNodeMetricsStale",
         "expr": "time() - dgxspark_node_metrics_last_run_timestamp_seconds > %s"
                 % _seconds(_duration(settings, "metrics_stale_after")),
         "for": "0s",
         "labels": {"severity": "warning"},
         "annotations": {
             "summary": "The GPU and fabric metrics of a node are stale.",
             "description": "dgxspark-node-metrics.timer has not written its file for longer than %s: "
                            "look at 'systemctl status dgxspark-node-metrics.service' on the node."
                            % settings["metrics_stale_after"]}},
        {"alert": "DgxsparkFabricErrorsIncreasing",
         "expr": '(increase(dgxspark_roce_port_counter{counter=~"%s"}[%s]) > 0)'
                 ' or (increase(dgxspark_roce_port_hw_counter{counter=~"%s"}[%s]) > 0)'
                 % (port_counters, nic_window, hw_counters, nic_window),
         "for": _duration(settings, "nic_error_for"),
         "labels": {"severity": "warning"},
         "annotations": {
             "summary": "A RoCE port's error counter is rising.",
             "description": "The counter label of the hca/port labels rose within %s: symbol, CRC or link "
                            "errors, discards or link downs. Reseat or replace the cable (QSFP112 DAC), check "
                            "the switch port, then measure with playbooks/validate.yml. NCCL timeouts after "
                            "hours of serving often start here." % nic_window}},
        {"alert": "DgxsparkFabricLinkDegraded",
         "expr": "(dgxspark_roce_port_active == 0)"
                 " or (dgxspark_roce_port_rate_gbps < dgxspark_roce_port_expected_rate_gbps)",
         "for": _duration(settings, "link_for"),
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "A fabric link is down or below its rate.",
             "description": "The hca/port labels' RoCE port is not ACTIVE or runs below the rate it should "
                            "(monitoring_fabric_rate_gbps). A Spark port half that stays down after a warm "
                            "reboot needs a cold boot; otherwise check the cable and the switch port."}},
        {"alert": "DgxsparkKvCacheFull",
         "expr": "max by (%s) (vllm:kv_cache_usage_perc) > %s" % (by, _number(kv_threshold)),
         "for": _duration(settings, "kv_cache_for"),
         "labels": {"severity": "warning"},
         "annotations": {
             "summary": "The KV cache is nearly full.",
             "description": "More than %d%% of the replica's KV cache is in use: requests queue and get "
                            "preempted. Lower engine_service_max_num_seqs or max_model_len, or add a replica."
                            % round(kv_threshold * 100)}},
        {"alert": "DgxsparkNodeMemoryLow",
         "expr": "node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes < %s" % _number(memory_ratio),
         "for": _duration(settings, "memory_for"),
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "A node is running out of its unified memory.",
             "description": "Less than %s%% of the node's memory is available. On a Spark the GPU shares this "
                            "memory: the engine and the system compete for it, and the node can stop answering "
                            "SSH. Lower engine_service_gpu_memory_utilization or stop what else runs there."
                            % _number(round(memory_ratio * 100, 2))}},
    ]
    for rule in alerts:
        for key in ("labels",):
            for name in rule[key]:
                if not _LABEL_RE.match(name):
                    raise MonitoringError("label %r is not a Prometheus label name" % name)
    return {"groups": [
        {"name": RULES_GROUP_RECORDING, "rules": recording},
        {"name": RULES_GROUP_ALERTS, "rules": alerts},
    ]}


_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def _seconds(duration):
    return _number(sum(float(amount) * _UNIT_SECONDS[unit]
                       for amount, unit in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", duration)))


def _number(value):
    value = float(value)
    return str(int(value)) if value == int(value) else repr(value)


def monitoring_servers(groups, server_group="monitoring", node_group="dgxspark_cluster"):
    """The hosts Prometheus runs on: those of O(server_group), else the first of O(node_group)."""
    if not isinstance(groups, dict):
        raise MonitoringError("groups %r is not the inventory's groups" % (groups,))
    return list(groups.get(server_group) or []) or list(groups.get(node_group) or [])[:1]


def metrics_readers(groups, hostvars, server_group="monitoring", node_group="dgxspark_cluster"):
    """Where the Prometheus hosts scrape from: each one's C(ansible_host), else its inventory name.

    The default reader list of the engine's API guard and of the exporters' firewall chain.
    """
    readers = []
    for host in monitoring_servers(groups, server_group, node_group):
        address = hostvars[host].get("ansible_host") if host in hostvars else None
        readers.append(str(address) if address else host)
    return readers


def query_url(listen_address):
    """The URL the monitoring host itself reaches Prometheus at, from its listen address
    (C(0.0.0.0:9090), C(:9090), C(10.0.0.5:9090), C([::]:9090))."""
    host, sep, port = str(listen_address).rpartition(":")
    if not sep or not port.isdigit():
        raise MonitoringError(
            "monitoring_prometheus_listen_address is %r; expected HOST:PORT such as 0.0.0.0:9090" % listen_address
        )
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host in ("[::]", "::"):
        host = "[::1]"
    return "http://%s:%s" % (host, port)


def scrape_report(targets, alerts):
    """Lines for status.yml from Prometheus's /api/v1/targets and /api/v1/alerts answers:
    each target's health and last scrape, then every firing alert."""
    lines = []
    active = (targets or {}).get("data", {}).get("activeTargets", [])

    def order(target):
        labels = target.get("labels", {})
        return labels.get("job", ""), str(labels.get("rank", ""))

    for target in sorted(active, key=order):
        labels = target.get("labels", {})
        lines.append("%s rank %s (%s, %s): %s, last scrape %s%s" % (
            labels.get("host", "?"), labels.get("rank", "?"), labels.get("job", "?"),
            target.get("scrapeUrl", ""), target.get("health", "unknown"), target.get("lastScrape", "never"),
            ("; " + target["lastError"]) if target.get("lastError") else ""))
    firing = [a for a in (alerts or {}).get("data", {}).get("alerts", []) if a.get("state") == "firing"]
    for alert in sorted(firing, key=lambda a: a.get("labels", {}).get("alertname", "")):
        labels = alert.get("labels", {})
        detail = ", ".join("%s=%s" % (k, labels[k]) for k in sorted(labels) if k not in ("alertname", "severity"))
        lines.append("FIRING %s (%s) since %s: %s" % (
            labels.get("alertname", "?"), detail, alert.get("activeAt", "?"),
            alert.get("annotations", {}).get("summary", "")))
    if not firing:
        lines.append("no alert is firing")
    return lines
