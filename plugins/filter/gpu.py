# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter, plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._gpu_peers import (
    GpuPeersError,
    gpu_peer_check,
    gpu_state_line,
)


def _gpu_peer_check(nodes, *args, **kwargs):
    return gpu_peer_check(plain(nodes), *args, **kwargs)


def _gpu_state_line(facts, *args, **kwargs):
    return gpu_state_line(plain(facts), *args, **kwargs)


class FilterModule:
    def filters(self):
        return {
            "gpu_peer_check": as_filter(_gpu_peer_check, GpuPeersError),
            "gpu_state_line": as_filter(_gpu_state_line, GpuPeersError),
        }
