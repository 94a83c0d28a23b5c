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
    assert FILTERS["container_runtime_docker_info_problems"]({"Runtimes": {"nvidia": {}}, "CgroupDriver": "cgroupfs"}) == []
    assert FILTERS["container_runtime_gpu_check_problems"]("", {})
    assert FILTERS["node_file_set_pending"]({}, {"paths": {}}) == {}
    assert FILTERS["apt_source_file"]("https://repo.example", "/", [], "/k.asc").endswith("Signed-By: /k.asc\n")
    assert FILTERS["apt_pin_file"](["a"], "1.0", 1001, "a").endswith("Pin-Priority: 1001\n")


def test_errors_reach_the_play_as_filter_errors():
    with pytest.raises(AnsibleFilterError, match="container_runtime_daemon_options sets 'live-restore'"):
        FILTERS["container_runtime_daemon_config"]({"live-restore": False}, "nvidia-container-runtime", LIMITS)
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_min_version"):
        FILTERS["nvidia_driver_verdict"]({}, "newest")
    with pytest.raises(AnsibleFilterError, match="was not read"):
        FILTERS["node_file_set_pending"]({"directories": [{"path": "/etc/docker", "mode": "0755"}]}, {"paths": {}})


class _NoDeepcopyDict(dict):
    """Stands in for ansible-core's lazy dicts, whose deepcopy copies every variable of the host."""

    def __deepcopy__(self, memo):
        raise AssertionError("the filter deep-copied a container it was given")


def test_daemon_config_copies_the_options_without_deepcopy():
    options = _NoDeepcopyDict({"runtimes": _NoDeepcopyDict({"crun": {"path": "crun"}}), "dns": ["10.0.0.1"]})
    config = FILTERS["container_runtime_daemon_config"](options, "nvidia-container-runtime", LIMITS)
    assert config["runtimes"] == {"crun": {"path": "crun"}, "nvidia": {"path": "nvidia-container-runtime"}}
    assert config["dns"] == ["10.0.0.1"]
    # The options given are left as they were.
    assert options == {"runtimes": {"crun": {"path": "crun"}}, "dns": ["10.0.0.1"]}
