# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter, plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_drift import (
    NodeDriftError,
    driver_version_drift,
    kernel_module_verdict,
    package_holds,
    pin_drift,
)


def _patterns_plain(function):
    def wrapper(listing, patterns, *args, **kwargs):
        return function(listing, plain(patterns), *args, **kwargs)

    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


def _driver_version_drift(versions):
    return driver_version_drift(plain(versions))


class FilterModule:
    def filters(self):
        return {
            "nvidia_driver_kernel_verdict": as_filter(kernel_module_verdict, NodeDriftError),
            "node_package_holds": as_filter(_patterns_plain(package_holds), NodeDriftError),
            "node_pin_drift": as_filter(_patterns_plain(pin_drift), NodeDriftError),
            "nvidia_driver_version_drift": as_filter(_driver_version_drift, NodeDriftError),
        }
