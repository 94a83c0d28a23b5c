# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter, plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._weights_dir import WeightsDirError, read_argv, verdict


def _verdict(command, host, path, manifest_path):
    return verdict(plain(command), host, path, manifest_path)


class FilterModule:
    def filters(self):
        return {
            "model_weights_dir_read_argv": as_filter(read_argv, WeightsDirError),
            "model_weights_dir_verdict": as_filter(_verdict, WeightsDirError),
        }
