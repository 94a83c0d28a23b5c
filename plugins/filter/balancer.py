# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._balancer import (
    BalancerError,
    balancer_config_problems,
    balancer_drain_lines,
    balancer_nginx_config,
    balancer_upstreams,
    engine_requests_in_flight,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter


class FilterModule:
    def filters(self):
        return {
            "balancer_upstreams": as_filter(balancer_upstreams, BalancerError),
            "balancer_config_problems": as_filter(balancer_config_problems, BalancerError),
            "balancer_nginx_config": as_filter(balancer_nginx_config, BalancerError),
            "balancer_drain_lines": as_filter(balancer_drain_lines, BalancerError),
            "engine_requests_in_flight": as_filter(engine_requests_in_flight, BalancerError),
        }
