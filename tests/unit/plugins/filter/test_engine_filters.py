# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter.engine import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_config import (
    EngineConfigError,
    effective_cudagraph_capture_size,
    engine_config_problems,
    parse_systemd_exec_line,
    rank_argv,
    replica_layout,
    systemd_exec_line,
)

FILTERS = FilterModule().filters()
engine_config_problems_filter = FILTERS["engine_config_problems"]
engine_cudagraph_capture_size = FILTERS["engine_cudagraph_capture_size"]
engine_rank_argv = FILTERS["engine_rank_argv"]
engine_replica_layout = FILTERS["engine_replica_layout"]
systemd_exec_line_filter = FILTERS["systemd_exec_line"]

SETTINGS = {
    "tensor_parallel_size": 2,
    "model": "deepseek-ai/DeepSeek-V4-Flash-0731",
    "image": "registry.example/vllm-dspark@sha256:" + "0" * 64,
    "max_num_seqs": 12,
    "speculative_config": {"method": "dspark", "num_speculative_tokens": 3},
    "compilation_config": {"cudagraph_mode": "FULL_AND_PIECEWISE"},
    "master_port": 29501,
    "api_port": 8000,
}
HOSTS = {"spark1": {"rank": 0, "fabric_address": "192.168.100.11"}, "spark2": {"rank": 1, "fabric_address": "192.168.100.12"}}


def test_filter_module_exposes_the_engine_filters():
    assert sorted(FilterModule().filters()) == [
        "engine_cluster_verdict",
        "engine_config_problems",
        "engine_container_argv",
        "engine_cudagraph_capture_size",
        "engine_env_file",
        "engine_rank_argv",
        "engine_replica_layout",
        "systemd_exec_line",
    ]


def test_filters_return_what_the_engine_logic_returns():
    cluster = {"hosts": HOSTS, "settings": SETTINGS}
    assert engine_config_problems_filter(cluster) == engine_config_problems(cluster) == []
    bad = {"hosts": HOSTS, "settings": dict(SETTINGS, api_port=29501)}
    assert engine_config_problems_filter(bad) == engine_config_problems(bad) != []
    assert engine_cudagraph_capture_size(SETTINGS) == effective_cudagraph_capture_size(SETTINGS) == 48
    assert engine_replica_layout(SETTINGS, 1) == replica_layout(SETTINGS, 1) == {"replica": 0, "node_rank": 1, "head_rank": 0}
    argv = engine_rank_argv(SETTINGS, 1, "192.168.100.11")
    assert argv == rank_argv(SETTINGS, 1, "192.168.100.11")
    assert "--headless" in argv
    line = systemd_exec_line_filter(["/usr/bin/vllm"] + argv)
    assert line == systemd_exec_line(["/usr/bin/vllm"] + argv)
    assert parse_systemd_exec_line(line) == ["/usr/bin/vllm"] + argv


def message_of(function, *args):
    with pytest.raises(EngineConfigError) as raised:
        function(*args)
    return str(raised.value)


@pytest.mark.parametrize(
    "wrapper, function, args",
    [
        (engine_config_problems_filter, engine_config_problems, ("hosts",)),
        (engine_rank_argv, rank_argv, (dict(SETTINGS, image="vllm:latest"), 0, "192.168.100.11")),
        (engine_rank_argv, rank_argv, (SETTINGS, 2, "192.168.100.11")),
        (engine_replica_layout, replica_layout, (SETTINGS, -1)),
        (engine_cudagraph_capture_size, effective_cudagraph_capture_size, (dict(SETTINGS, max_cudagraph_capture_size=8),)),
        (systemd_exec_line_filter, systemd_exec_line, (["vllm", "serve"],)),
    ],
)
def test_errors_become_filter_errors_with_the_same_message(wrapper, function, args):
    expected = message_of(function, *args)
    with pytest.raises(AnsibleFilterError) as raised:
        wrapper(*args)
    assert raised.value.message == expected
    assert isinstance(raised.value.orig_exc, EngineConfigError)
