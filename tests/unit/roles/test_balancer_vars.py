# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The balancer reads the engine's layout from the first engine host's variables, a
setting the inventory leaves out taking the engine's own default (its row), not a
number of the balancer's."""

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
