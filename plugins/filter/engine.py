# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_config import (
    EngineConfigError,
    effective_cudagraph_capture_size,
    engine_config_problems,
    rank_argv,
    replica_layout,
    systemd_exec_line,
)


def engine_config_problems_filter(cluster):
    try:
        return engine_config_problems(cluster)
    except EngineConfigError as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


def engine_rank_argv(settings, rank, master_address):
    try:
        return rank_argv(settings, rank, master_address)
    except EngineConfigError as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


def engine_replica_layout(settings, rank):
    try:
        return replica_layout(settings, rank)
    except EngineConfigError as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


def engine_cudagraph_capture_size(settings):
    try:
        return effective_cudagraph_capture_size(settings)
    except EngineConfigError as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


def systemd_exec_line_filter(argv):
    try:
        return systemd_exec_line(argv)
    except EngineConfigError as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


class FilterModule:
    def filters(self):
        return {
            "engine_config_problems": engine_config_problems_filter,
            "engine_rank_argv": engine_rank_argv,
            "engine_replica_layout": engine_replica_layout,
            "engine_cudagraph_capture_size": engine_cudagraph_capture_size,
            "systemd_exec_line": systemd_exec_line_filter,
        }
