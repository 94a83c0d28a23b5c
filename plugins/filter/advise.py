# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._layout_advice import AdviceError, prometheus_window


class FilterModule:
    def filters(self):
        return {
            "prometheus_window": as_filter(prometheus_window, AdviceError),
        }
