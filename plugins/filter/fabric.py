# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report import (
    build_report,
    directed_pairs,
    pair_rounds,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_markdown import render_markdown
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_parsers import FabricReportError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter


def fabric_pair_rounds(hosts, directed=False):
    rounds = pair_rounds(hosts)
    return directed_pairs(rounds) if directed else rounds


def fabric_report(results, hosts, counters_before=None, counters_after=None, thresholds=None, metadata=None):
    return build_report(hosts, results, counters_before, counters_after, thresholds, metadata)


class FilterModule:
    def filters(self):
        return {
            "fabric_pair_rounds": as_filter(fabric_pair_rounds, FabricReportError),
            "fabric_report": as_filter(fabric_report, FabricReportError),
            "fabric_report_markdown": as_filter(render_markdown, FabricReportError),
        }
