# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils._fabric_plan import (
    counters_by_hca,
    fabric_plan_problems,
)


class FilterModule:
    def filters(self):
        return {
            "fabric_plan_problems": fabric_plan_problems,
            "fabric_counters_by_hca": counters_by_hca,
        }
