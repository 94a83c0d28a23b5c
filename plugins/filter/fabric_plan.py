# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_plan import (
    FabricPlanError,
    counters_by_hca,
    fabric_plan_problems,
    node_problems,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter


def fabric_node_problems(links, host, found, facts=None, management=None):
    """node_problems with the links first, as the filter receives them."""
    return node_problems(host, links, found, facts, management)


class FilterModule:
    def filters(self):
        return {
            "fabric_plan_problems": as_filter(fabric_plan_problems, FabricPlanError),
            "fabric_node_problems": as_filter(fabric_node_problems, FabricPlanError),
            "fabric_counters_by_hca": counters_by_hca,
        }
