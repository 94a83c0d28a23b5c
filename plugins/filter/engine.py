# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_health import (
    EngineHealthError,
    cluster_verdict,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_timeline import (
    EngineTimelineError,
    format_timeline,
    start_timeline,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_argv import (
    container_argv,
    effective_cudagraph_capture_size,
    env_file_text,
    rank_argv,
    replica_layout,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_container_checks import engine_container_problems
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import EngineConfigError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_systemd import (
    systemd_exec_line,
    systemd_verify_command,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_validation import engine_config_problems
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._progress import ProgressError, start_phase_line


class FilterModule:
    def filters(self):
        return {
            "engine_config_problems": as_filter(engine_config_problems, EngineConfigError),
            "engine_container_problems": as_filter(engine_container_problems, EngineConfigError),
            "engine_rank_argv": as_filter(rank_argv, EngineConfigError),
            "engine_replica_layout": as_filter(replica_layout, EngineConfigError),
            "engine_cudagraph_capture_size": as_filter(effective_cudagraph_capture_size, EngineConfigError),
            "systemd_exec_line": as_filter(systemd_exec_line, EngineConfigError),
            "systemd_verify_command": as_filter(systemd_verify_command, EngineConfigError),
            "engine_container_argv": as_filter(container_argv, EngineConfigError),
            "engine_env_file": as_filter(env_file_text, EngineConfigError),
            "engine_cluster_verdict": as_filter(cluster_verdict, EngineHealthError),
            "engine_start_timeline": as_filter(start_timeline, EngineTimelineError),
            "engine_start_timeline_text": as_filter(format_timeline, EngineTimelineError),
            "engine_start_phase_line": as_filter(start_phase_line, ProgressError),
        }
