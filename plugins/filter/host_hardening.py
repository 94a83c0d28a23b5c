# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._host_hardening import (
    HostHardeningError,
    earlyoom_args,
    earlyoom_default_file,
    running_args_differ,
    settings_problems,
)


def _plain(value):
    # ansible-core 2.19 hands filters lazy containers; the functions want lists and dicts.
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _earlyoom_args(mem_percent, swap_percent, prefer, avoid, report_interval=3600, extra_args=None):
    return earlyoom_args(mem_percent, swap_percent, _plain(prefer), _plain(avoid), report_interval, _plain(extra_args))


def _problems(settings):
    return settings_problems(_plain(settings))


class FilterModule:
    def filters(self):
        return {
            "host_hardening_earlyoom_args": as_filter(_earlyoom_args, HostHardeningError),
            "host_hardening_earlyoom_default_file": as_filter(earlyoom_default_file, HostHardeningError),
            "host_hardening_earlyoom_args_differ": as_filter(running_args_differ, HostHardeningError),
            "host_hardening_problems": as_filter(_problems, HostHardeningError),
        }
