# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_schedule import (
    FabricScheduleError,
    plan_digest,
    schedule,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter


class FilterModule:
    def filters(self):
        return {
            "fabric_plan_digest": as_filter(plan_digest, FabricScheduleError),
            "fabric_report_schedule": as_filter(schedule, FabricScheduleError),
        }
