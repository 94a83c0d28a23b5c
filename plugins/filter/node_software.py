# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter, plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_software import (
    NodeSoftwareError,
    apt_pin_file,
    apt_source_file,
    daemon_config,
    daemon_options_problems,
    docker_info_problems,
    driver_verdict,
    gpu_check_problems,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_state import (
    NodeStateError,
    file_set_pending,
)


def _daemon_config(options, *args, **kwargs):
    # daemon_config deep-copies the options it adds to (see plugin_utils/_filters.py plain()).
    return daemon_config(plain(options), *args, **kwargs)


class FilterModule:
    def filters(self):
        return {
            "nvidia_driver_verdict": as_filter(driver_verdict, NodeSoftwareError),
            "container_runtime_daemon_config": as_filter(_daemon_config, NodeSoftwareError),
            "container_runtime_daemon_options_problems": as_filter(daemon_options_problems, NodeSoftwareError),
            "container_runtime_docker_info_problems": as_filter(docker_info_problems, NodeSoftwareError),
            "container_runtime_gpu_check_problems": as_filter(gpu_check_problems, NodeSoftwareError),
            "node_file_set_pending": as_filter(file_set_pending, NodeStateError),
            "apt_source_file": as_filter(apt_source_file, NodeSoftwareError),
            "apt_pin_file": as_filter(apt_pin_file, NodeSoftwareError),
        }
