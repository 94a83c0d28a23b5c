# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from unit_support import assert_filter_error_matches

from ansible_collections.dgxspark.cluster.plugins.filter import engine
from ansible_collections.dgxspark.cluster.plugins.filter.engine import FilterModule
from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_timeline import (
    EngineTimelineError,
    format_timeline,
    start_timeline,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_argv import (
    effective_cudagraph_capture_size,
    rank_argv,
    replica_layout,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_container_checks import engine_container_problems
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import EngineConfigError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_systemd import (
    parse_systemd_exec_line,
    systemd_exec_line,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_validation import engine_config_problems

FILTERS = FilterModule().filters()
FILTER_DIR = Path(engine.__file__).parent
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
        "engine_container_problems",
        "engine_cudagraph_capture_size",
        "engine_env_file",
        "engine_rank_argv",
        "engine_replica_layout",
        "engine_start_phase_line",
        "engine_start_timeline",
        "engine_start_timeline_text",
        "systemd_exec_line",
        "systemd_verify_command",
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


def test_the_container_problems_filter_is_the_container_check():
    settings = {"container_extra_args": ["--privileged"], "env": {"VLLM_HOST_IP": "10.0.0.1"}}
    problems = FILTERS["engine_container_problems"](settings)
    assert problems == engine_container_problems(settings) and len(problems) == 2
    doc = yaml.safe_load((FILTER_DIR / "engine_container_problems.yml").read_text())
    assert doc["DOCUMENTATION"]["name"] == "engine_container_problems"


@pytest.mark.parametrize(
    "wrapper, function, args",
    [
        (engine_config_problems_filter, engine_config_problems, ("hosts",)),
        (FILTERS["engine_container_problems"], engine_container_problems, (["--privileged"],)),
        (engine_rank_argv, rank_argv, (dict(SETTINGS, image="vllm:latest"), 0, "192.168.100.11")),
        (engine_rank_argv, rank_argv, (SETTINGS, 2, "192.168.100.11")),
        (engine_replica_layout, replica_layout, (SETTINGS, -1)),
        (engine_cudagraph_capture_size, effective_cudagraph_capture_size, (dict(SETTINGS, max_cudagraph_capture_size=8),)),
        (systemd_exec_line_filter, systemd_exec_line, (["vllm", "serve"],)),
    ],
)
def test_errors_become_filter_errors_with_the_same_message(wrapper, function, args):
    assert_filter_error_matches(EngineConfigError, lambda: function(*args), lambda: wrapper(*args))


# A backslash at the end of a line continues it: the text is as journalctl printed it.
JOURNAL = """\
2026-12-03T16:14:58.314523+0000 spark1 systemd[1]: Started dgxspark-engine.service - dgxspark engine rank 0 (tiny, version 168ee1761a544f77).
2026-12-03T16:16:07.294787+0000 spark1 docker[4582]: (Worker pid=29) INFO 12-03 16:16:07 [parallel_state.py:1906] world_size=4 rank=0 local_rank=0 \
distributed_init_method=tcp://192.168.100.11:29501 backend=gloo
2026-12-03T16:16:09.955854+0000 spark1 docker[4582]: (Worker_TP0 pid=29) INFO 12-03 16:16:09 [base_loader.py:82] Initializing model took 0.211906 seconds
2026-12-03T16:16:09.971946+0000 spark1 docker[4582]: (Worker_TP0 pid=29) INFO 12-03 16:16:09 [default_loader.py:501] Loading weights took 0.01 seconds
2026-12-03T16:16:20.511924+0000 spark1 docker[4582]: INFO:     Application startup complete.
"""


def test_the_timeline_filters_are_documented_beside_the_others():
    for name in ("engine_start_timeline", "engine_start_timeline_text"):
        doc = yaml.safe_load((FILTER_DIR / (name + ".yml")).read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["RETURN"]["_value"]["type"] == ("dict" if name == "engine_start_timeline" else "str")
    options = yaml.safe_load((FILTER_DIR / "engine_start_timeline.yml").read_text())["DOCUMENTATION"]["options"]
    assert sorted(options) == ["_input", "ready_at", "stop_seconds"]


def test_the_timeline_filters_are_the_timeline_functions():
    timeline = FILTERS["engine_start_timeline"](JOURNAL, 1796314581.7, 4.1)
    assert timeline == start_timeline(JOURNAL, 1796314581.7, 4.1)
    assert [part["name"] for part in timeline["parts"]] == [
        "stop", "startup", "rendezvous", "model load", "engine init", "first completion",
    ]
    text = FILTERS["engine_start_timeline_text"](timeline)
    assert text == format_timeline(timeline) == (
        "stop 4.1 s, startup 69.0 s, rendezvous 2.7 s, model load 0.0 s, engine init 10.5 s, "
        "first completion 1.2 s (total 87.5 s)"
    )
    # As a play calls it, by keyword.
    assert FILTERS["engine_start_timeline"](JOURNAL.splitlines(), stop_seconds=4.1) == start_timeline(JOURNAL, None, 4.1)


@pytest.mark.parametrize(
    "name, function, args",
    [
        ("engine_start_timeline", start_timeline, ({"stdout": JOURNAL},)),
        ("engine_start_timeline", start_timeline, (JOURNAL, "soon")),
        ("engine_start_timeline", start_timeline, (JOURNAL, None, -4.1)),
        ("engine_start_timeline_text", format_timeline, ({"parts": None},)),
    ],
)
def test_timeline_errors_become_filter_errors_with_the_same_message(name, function, args):
    assert_filter_error_matches(EngineTimelineError, lambda: function(*args), lambda: FILTERS[name](*args))


def test_the_engine_image_filters_reach_the_play_as_filter_errors():
    from ansible_collections.dgxspark.cluster.plugins.filter.engine_image import FilterModule as ImageFilters

    image_filters = ImageFilters().filters()
    spec = image_filters["engine_image_read_spec"]("repo/x@sha256:" + "ab" * 32)
    assert spec["commands"]["local"] == ["docker", "image", "inspect", "dgxspark/engine:" + "ab" * 6]
    with pytest.raises(AnsibleFilterError, match="is not pinned by digest"):
        image_filters["engine_image_read_spec"]("repo/x:latest")
    with pytest.raises(AnsibleFilterError, match="docker is not installed"):
        image_filters["engine_image_inspect"](
            {"commands": {"docker": {"rc": 1, "stdout": "", "stderr": ""}}}, "repo/x@sha256:" + "ab" * 32)
