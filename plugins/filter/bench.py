# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils._bench import (
    BenchError,
    llama_benchy_args,
    wave_line,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter


class FilterModule:
    def filters(self):
        return {
            "bench_wave_line": as_filter(wave_line, BenchError),
            "bench_llama_benchy_args": as_filter(llama_benchy_args, BenchError),
        }
