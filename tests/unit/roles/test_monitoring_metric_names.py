# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The monitoring role's rules name only metrics our targets export: vLLM's (a /metrics
capture of the simulated cluster's real engine, tests/unit/fixtures/monitoring/vllm_metrics.txt,
plus the speculative-decoding counters the CPU engine does not run), node-exporter's, the
collector's and the recording rules' own. A misspelt metric would make an alert that never
fires, which promtool accepts."""

from __future__ import annotations

import re

from promtool_support import rule_settings

from unit_support import FIXTURES

from ansible_collections.dgxspark.cluster.plugins.module_utils import _node_metrics
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import _monitoring

# vLLM 0.32's vllm/v1/spec_decode/metrics.py: exported only with speculative decoding on,
# which the CPU engine of the simulation has not.
SPEC_DECODE = {"vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
               "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_per_pos_total"}
# node-exporter 1.5 (Debian bookworm) meminfo and Prometheus's own series.
NODE_EXPORTER = {"node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes", "up"}
# Collector metrics that only appear on some hardware (not in a default collect()).
COLLECTOR = {metric for _f, metric, _h, _x in _node_metrics.GPU_FIELDS} | {
    "dgxspark_roce_port_hw_counter", "dgxspark_roce_port_counter", "dgxspark_roce_port_rate_gbps",
    "dgxspark_roce_port_active", "dgxspark_roce_port_state", "dgxspark_roce_port_phys_state",
    "dgxspark_roce_port_expected_rate_gbps", "dgxspark_roce_hca_present", "dgxspark_unit_active",
    "dgxspark_gpu_query_success", "dgxspark_node_metrics_last_run_timestamp_seconds"}
PROMQL_WORDS = {"sum", "by", "rate", "increase", "histogram_quantile", "le", "without", "max", "min", "avg", "on",
                "and", "or", "unless", "ignoring", "group_left", "group_right", "count", "time", "bool", "offset"}
NAME_RE = re.compile(r"(?<![\w:$\"'])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:\"'])")


def vllm_names():
    names = set()
    for line in (FIXTURES / "monitoring" / "vllm_metrics.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            names.add(re.match(r"[^{ ]+", line).group(0))
    return names


def exported():
    recorded = {rule["record"] for group in _monitoring.prometheus_rules(rule_settings())["groups"]
                for rule in group["rules"] if "record" in rule}
    return vllm_names() | SPEC_DECODE | NODE_EXPORTER | COLLECTOR | recorded


def metric_names(expr):
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\(\s*[a-z_,\s]+\)", lambda m: "" if re.search(r"\b(by|on)\s*$", expr[:m.start()]) else m.group(0),
                  expr)
    names = {word for word in NAME_RE.findall(expr) if word not in PROMQL_WORDS and not re.fullmatch(r"[0-9.e]+", word)}
    return names


def test_the_capture_holds_the_metrics_the_rules_read():
    names = vllm_names()
    for name in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:num_requests_running",
                 "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
        assert name in names


def test_the_check_catches_a_metric_no_target_exports():
    assert metric_names('sum by (replica) (rate(vllm:gpu_cache_usage_perc{job="vllm"}[5m]))') == {
        "vllm:gpu_cache_usage_perc"}
    assert "vllm:gpu_cache_usage_perc" not in exported()


def test_the_rules_read_only_exported_metrics():
    known = exported()
    for group in _monitoring.prometheus_rules(rule_settings())["groups"]:
        for rule in group["rules"]:
            assert metric_names(rule["expr"]) - known == set(), rule["expr"]
