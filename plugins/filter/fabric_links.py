# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils._fabric_links import (
    FabricLinkError,
    ping_plan,
    verdict,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_plan import plans_shape_problems
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter


def fabric_ping_plan(plans, me):
    """ping_plan, refusing mistyped links with a message instead of a traceback
    (verify.yml publishes the plans without validate.yml's checks). The check
    lives here so that the node module fabric_link_check ships no plan code."""
    problems = plans_shape_problems(plans)
    if problems:
        raise FabricLinkError("; ".join(problems))
    return ping_plan(plans, me)


class FilterModule:
    def filters(self):
        return {
            "fabric_ping_plan": as_filter(fabric_ping_plan, FabricLinkError),
            "fabric_link_verdict": as_filter(verdict, FabricLinkError),
        }
