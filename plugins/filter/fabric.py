# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.module_utils._fabric_report import (
    FabricReportError,
    build_report,
    directed_pairs,
    pair_rounds,
    render_markdown,
)


def fabric_pair_rounds(hosts, directed=False):
    try:
        rounds = pair_rounds(hosts)
        return directed_pairs(rounds) if directed else rounds
    except FabricReportError as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


def fabric_report(results, hosts, counters_before=None, counters_after=None, thresholds=None, metadata=None):
    try:
        return build_report(hosts, results, counters_before, counters_after, thresholds, metadata)
    except FabricReportError as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


def fabric_report_markdown(report):
    try:
        return render_markdown(report)
    except FabricReportError as exc:
        raise AnsibleFilterError(str(exc), orig_exc=exc) from exc


class FilterModule:
    def filters(self):
        return {
            "fabric_pair_rounds": fabric_pair_rounds,
            "fabric_report": fabric_report,
            "fabric_report_markdown": fabric_report_markdown,
        }
