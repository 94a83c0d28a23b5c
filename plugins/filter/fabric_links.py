# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils._fabric_links import (
    FabricLinkError,
    ping_plan,
    verdict,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter


class FilterModule:
    def filters(self):
        return {
            "fabric_ping_plan": as_filter(ping_plan, FabricLinkError),
            "fabric_link_verdict": as_filter(verdict, FabricLinkError),
        }
