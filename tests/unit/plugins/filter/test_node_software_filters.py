# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter.node_software import FilterModule

FILTERS = FilterModule().filters()
LIMITS = {name: {"soft": 1024, "hard": 1024} for name in ("memlock", "nofile", "stack")}


def test_every_filter_has_a_doc_sidecar():
    from unit_support import REPO_ROOT

    for name in FILTERS:
        assert (REPO_ROOT / "plugins" / "filter" / ("%s.yml" % name)).is_file(), name


def test_filters_answer():
    assert FILTERS["nvidia_driver_verdict"]({}, "580.95.05")["state"] == "missing"
    assert FILTERS["container_runtime_daemon_config"]({}, "nvidia-container-runtime", LIMITS)["live-restore"] is True
    assert FILTERS["container_runtime_runtimes_problems"]({"nvidia": {}}) == []
    assert FILTERS["container_runtime_gpu_check_problems"]("", {})
    assert FILTERS["node_state_read_argv"]({"units": ["docker"]})[:2] == ["sh", "-c"]
    assert FILTERS["node_state"]("@@dgxspark-state end", {})["paths"] == {}
    assert FILTERS["node_file_set_pending"]({}, {"paths": {}}) == {}


def test_errors_reach_the_play_as_filter_errors():
    with pytest.raises(AnsibleFilterError, match="container_runtime_daemon_options sets 'live-restore'"):
        FILTERS["container_runtime_daemon_config"]({"live-restore": False}, "nvidia-container-runtime", LIMITS)
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_min_version"):
        FILTERS["nvidia_driver_verdict"]({}, "newest")
    with pytest.raises(AnsibleFilterError, match="cannot measure free space for 'srv'"):
        FILTERS["node_state_read_argv"]({"disks": ["srv"]})
    with pytest.raises(AnsibleFilterError, match="stopped before its end"):
        FILTERS["node_state"]("", {})
    with pytest.raises(AnsibleFilterError, match="was not read"):
        FILTERS["node_file_set_pending"]({"directories": [{"path": "/etc/docker", "mode": "0755"}]}, {"paths": {}})
