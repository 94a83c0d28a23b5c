# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_configs import (
    FabricConfigError,
    fabric_config_verdict,
    read_argv,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_plan import (
    FabricPlanError,
    counters_by_hca,
    fabric_plan_problems,
    node_problems,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter, plain


def fabric_node_problems(links, host, found, facts=None, management=None):
    """node_problems with the links first, as the filter receives them."""
    return node_problems(host, links, found, facts, management)


def fabric_config_problems(links, host, mtu, found, context=None):
    """fabric_config_verdict with the links first, as a mapping: problems, adopted."""
    problems, adopted = fabric_config_verdict(host, plain(links), mtu, plain(found), plain(context))
    return {"problems": problems, "adopted": adopted}


class FilterModule:
    def filters(self):
        return {
            "fabric_plan_problems": as_filter(fabric_plan_problems, FabricPlanError),
            "fabric_node_problems": as_filter(fabric_node_problems, FabricPlanError),
            "fabric_config_problems": as_filter(fabric_config_problems, FabricConfigError),
            "fabric_config_read_argv": read_argv,
            "fabric_counters_by_hca": counters_by_hca,
        }
