# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine_service role reads each host's fabric address from the fabric role's
plan (roce_fabric_node_plan, exported by its validate entry point), one name for
the value whether the inventory gives roce_fabric_address or roce_fabric_links."""

from __future__ import annotations

from unit_support import template_role_vars


def plan(*addresses):
    return {"links": [{"netdev": "n%d" % i, "hca": "h%d" % i, "address": a, "prefix": 24}
                      for i, a in enumerate(addresses)], "mtu": 9000}


def test_engine_hosts_take_the_first_planned_link_of_each_host():
    hostvars = {
        # Two halves of the port: the first link is the rank's address; no roce_fabric_address at all.
        "spark1": {"engine_service_rank": 0, "roce_fabric_node_plan": plan("192.168.201.11", "192.168.200.11")},
        # A raw roce_fabric_address that the plan does not hold is not read.
        "spark2": {"engine_service_rank": 1, "roce_fabric_address": "10.9.9.9",
                   "roce_fabric_node_plan": plan("192.168.201.12")},
        # No plan (the fabric check has not run for it): no address, which the engine check refuses.
        "spark3": {"engine_service_rank": 2},
    }
    variables = {"groups": {"dgxspark_cluster": list(hostvars)}, "hostvars": hostvars}
    (result,) = template_role_vars("engine_service", [(variables, {"hosts": "{{ engine_service_hosts }}"})])
    assert result["hosts"] == {
        "spark1": {"rank": 0, "fabric_address": "192.168.201.11"},
        "spark2": {"rank": 1, "fabric_address": "192.168.201.12"},
        "spark3": {"rank": 2, "fabric_address": None},
    }
