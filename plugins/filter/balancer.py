# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._balancer import (
    BalancerError,
    balancer_config_problems,
    balancer_nginx_config,
    balancer_upstreams,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter


class FilterModule:
    def filters(self):
        return {
            "balancer_upstreams": as_filter(balancer_upstreams, BalancerError),
            "balancer_config_problems": as_filter(balancer_config_problems, BalancerError),
            "balancer_nginx_config": as_filter(balancer_nginx_config, BalancerError),
        }
