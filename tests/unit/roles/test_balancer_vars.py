# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The balancer reads the engine's layout from the first engine host's variables, a
setting the inventory leaves out taking the engine's own default (its row), not a
number of the balancer's; and each head's address from the one fact the roce_fabric
role exports (roce_fabric_node_address), by the filter the engine reads it with."""

from __future__ import annotations

from unit_support import template_role_vars

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import SETTINGS_BY_NAME

EXPRESSIONS = {"engine": "{{ balancer_engine_settings }}", "upstreams": "{{ balancer_upstreams }}",
               "reserved": "{{ balancer_settings.reserved_ports }}"}


def fleet(**engine_vars):
    hostvars = {"spark%d" % (rank + 1): dict(engine_vars, engine_service_rank=rank, roce_fabric_address="10.0.0.%d" % (rank + 1))
                for rank in range(4)}
    return {"groups": {"dgxspark_cluster": sorted(hostvars), "dgxspark_balancer": []}, "hostvars": hostvars}


def test_the_balancer_reads_the_engine_hosts_layout():
    (result,) = template_role_vars("balancer", [(fleet(engine_service_tensor_parallel_size=2, engine_service_replicas=2,
                                                       engine_service_api_port=9000, engine_service_master_port=29600),
                                                 EXPRESSIONS)])
    assert result["engine"] == {"tensor_parallel_size": 2, "replicas": 2, "api_port": 9000, "master_port": 29600}
    assert [(upstream["name"], upstream["port"]) for upstream in result["upstreams"]] == [("spark1", 9000), ("spark3", 9000)]
    # The balancer runs on rank 0 here, which keeps its API and rendezvous ports.
    assert result["reserved"] == [9000, 29600]


def test_what_the_inventory_leaves_out_is_the_engines_default():
    (result, empty) = template_role_vars("balancer", [
        (fleet(), EXPRESSIONS),
        ({"groups": {"dgxspark_cluster": [], "dgxspark_balancer": []}, "hostvars": {}}, {"engine": EXPRESSIONS["engine"]}),
    ])
    defaults = {name: SETTINGS_BY_NAME[name].default for name in ("tensor_parallel_size", "replicas", "api_port", "master_port")}
    assert result["engine"] == defaults == empty["engine"]
    assert result["reserved"] == [defaults["api_port"], defaults["master_port"]]


def heads(hostvars):
    """The balancer's upstreams for a fleet of 2 TP=2 replicas with these host variables."""
    layout = {"engine_service_tensor_parallel_size": 2, "engine_service_replicas": 2}
    hostvars = {host: dict(layout, engine_service_rank=rank, **variables)
                for rank, (host, variables) in enumerate(sorted(hostvars.items()))}
    return {"groups": {"dgxspark_cluster": sorted(hostvars), "dgxspark_balancer": []}, "hostvars": hostvars}


def link(address):
    return {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": address, "prefix": 24}


# An inventory with roce_fabric_links only (no roce_fabric_address), run alone (no fabric fact):
# the first link of each head, as the fabric role would export it.
LINKS_ONLY = heads({"spark%d" % i: {"roce_fabric_links": [link("192.168.201.1%d" % i), link("192.168.200.1%d" % i)]}
                    for i in range(1, 5)})
# After the fabric role read the links: spark3's first link has no carrier, so the fact (and the
# engine's VLLM_HOST_IP) is its second link's address, which the balancer follows; the raw
# roce_fabric_address is not read.
FACTS = heads({"spark%d" % i: {"roce_fabric_address": "10.9.9.%d" % i, "roce_fabric_links": [link("192.168.201.1%d" % i)],
                               "roce_fabric_node_address": "192.168.20%d.1%d" % (0 if i == 3 else 1, i)}
               for i in range(1, 5)})
# A balancer outside the fabric names the variable to reach the heads on.
MANAGEMENT = heads({"spark%d" % i: {"roce_fabric_address": "192.168.100.1%d" % i, "ansible_host": "10.0.0.%d" % i}
                    for i in range(1, 5)})


def test_the_upstreams_are_the_heads_fabric_addresses_from_the_fabric_fact():
    upstream = "{{ balancer_upstreams | map(attribute='address') | list }}"
    management = dict(MANAGEMENT, balancer_upstream_address_variable="ansible_host")
    links_only, facts, outside = template_role_vars("balancer", [
        (LINKS_ONLY, {"upstreams": upstream, "engine": "{{ balancer_engine_ranks }}"}),
        (FACTS, {"upstreams": upstream}),
        (management, {"upstreams": upstream}),
    ])
    assert links_only["upstreams"] == ["192.168.201.11", "192.168.201.13"]
    # The same mapping the engine check reads (engine_service_hosts), from the same filter.
    assert links_only["engine"]["spark2"] == {"rank": 1, "fabric_address": "192.168.201.12"}
    assert facts["upstreams"] == ["192.168.201.11", "192.168.200.13"]
    assert outside["upstreams"] == ["10.0.0.1", "10.0.0.3"]
