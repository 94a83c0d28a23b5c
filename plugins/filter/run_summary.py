# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._run_summary import (
    RunSummaryError,
    part_limit_problems,
    part_runs,
    part_selection_problems,
    run_summary,
)


class FilterModule:
    def filters(self):
        return {
            "run_limit_problems": as_filter(part_limit_problems, RunSummaryError),
            "run_part_problems": as_filter(part_selection_problems, RunSummaryError),
            "run_part_runs": as_filter(part_runs, RunSummaryError),
            "run_summary": as_filter(run_summary, RunSummaryError),
        }
