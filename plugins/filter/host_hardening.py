# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter, plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._host_hardening import (
    HostHardeningError,
    earlyoom_args,
    earlyoom_default_file,
    running_args_differ,
    settings_problems,
)


def _earlyoom_args(mem_percent, swap_percent, prefer, avoid, report_interval=3600, extra_args=None):
    return earlyoom_args(mem_percent, swap_percent, plain(prefer), plain(avoid), report_interval, plain(extra_args))


def _problems(settings):
    return settings_problems(plain(settings))


class FilterModule:
    def filters(self):
        return {
            "host_hardening_earlyoom_args": as_filter(_earlyoom_args, HostHardeningError),
            "host_hardening_earlyoom_default_file": as_filter(earlyoom_default_file, HostHardeningError),
            "host_hardening_earlyoom_args_differ": as_filter(running_args_differ, HostHardeningError),
            "host_hardening_problems": as_filter(_problems, HostHardeningError),
        }
