# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""One rule for a node's fabric address (plugins/plugin_utils/_fabric_address.py): the
first link with carrier once the links are read, else the first planned link, whether
the inventory gives roce_fabric_address, roce_fabric_links or both; and one mapping of
the engine hosts' ranks and addresses, read from the fact the fabric role exports."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_address import (
    ADDRESS_FACT,
    engine_hosts,
    host_address,
    node_address,
    node_link,
    planned_links,
)

PORT1 = {"netdev": "enp1s0f1np1", "hca": "rocep1s0f1", "address": "192.168.201.11", "prefix": 24}
PORT2 = {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": "192.168.200.11", "prefix": 24}


def state(link, carrier):
    """One entry of roce_fabric_link_state, as fabric_link_verdict leaves it."""
    return {"ifname": link["netdev"], "hca": link["hca"], "address": link["address"], "present": True,
            "carrier": carrier, "configured": carrier}


@pytest.mark.parametrize("link_state, expected", [
    (None, PORT1),                                            # before the links are read: the first planned
    ([state(PORT1, True), state(PORT2, True)], PORT1),        # both up: the first
    ([state(PORT1, False), state(PORT2, True)], PORT2),       # the first without carrier: NCCL leaves it out
    ([state(PORT1, False), state(PORT2, False)], PORT1),      # none up (check mode judges nothing): the planned
    ([], PORT1),
], ids=["planned", "both-up", "first-without-carrier", "none-up", "no-state"])
def test_the_address_is_on_the_first_link_with_carrier_else_the_first_planned(link_state, expected):
    assert node_link([PORT1, PORT2], link_state) == expected
    assert node_address([PORT1, PORT2], link_state) == expected["address"]


@pytest.mark.parametrize("links", [None, "", "enP2p1s0f1np1", PORT1, [], ["enP2p1s0f1np1"], [None, PORT2]],
                         ids=["none", "empty-string", "string", "mapping", "empty-list", "list-of-strings", "none-first"])
def test_links_the_plan_check_refuses_give_no_address_instead_of_failing(links):
    # validate.yml exports the address before its assert names what is wrong with the links.
    assert node_link(links) == {}
    assert node_address(links) is None


def test_a_link_without_an_address_gives_none():
    assert node_address([dict(PORT2, address="")]) is None
    assert node_address([dict(PORT2, address=None)]) is None


# --- A host's address from its variables: address only, links only, both -------------

ADDRESS_ONLY = {"roce_fabric_address": "192.168.200.11"}
LINKS_ONLY = {"roce_fabric_links": [PORT1, PORT2]}
BOTH = {"roce_fabric_address": "10.9.9.9", "roce_fabric_links": [PORT2]}


@pytest.mark.parametrize("host_vars, expected", [
    (ADDRESS_ONLY, "192.168.200.11"),
    (LINKS_ONLY, "192.168.201.11"),
    # roce_fabric_links replaces the default link of roce_fabric_address, so the links win.
    (BOTH, "192.168.200.11"),
    ({}, None),
], ids=["address-only", "links-only", "both", "neither"])
def test_without_the_fact_a_host_gets_what_the_fabric_role_would_export_first(host_vars, expected):
    assert host_address(host_vars) == expected


def test_the_planned_links_of_an_address_only_inventory_are_the_role_default_link():
    assert planned_links(ADDRESS_ONLY) == [{"address": "192.168.200.11"}]
    assert planned_links(LINKS_ONLY) == [PORT1, PORT2]


@pytest.mark.parametrize("host_vars", [ADDRESS_ONLY, LINKS_ONLY, BOTH], ids=["address-only", "links-only", "both"])
def test_the_exported_fact_wins_over_the_inventory(host_vars):
    # The fabric role read the links: the first one had no carrier, the node serves on 192.168.200.11.
    assert host_address(dict(host_vars, **{ADDRESS_FACT: "192.168.200.12"})) == "192.168.200.12"
    assert host_address(dict(host_vars, **{ADDRESS_FACT: None})) is None


# --- The engine hosts' ranks and addresses, in one place --------------------------------

def test_engine_hosts_read_the_rank_and_the_fabric_address_of_every_host():
    hostvars = {
        "spark1": dict(LINKS_ONLY, engine_service_rank=0),
        "spark2": dict(ADDRESS_ONLY, engine_service_rank=1),
        "spark3": dict(BOTH, engine_service_rank=2, **{ADDRESS_FACT: "192.168.200.13"}),
        "spark4": {},
    }
    assert engine_hosts(sorted(hostvars), hostvars) == {
        "spark1": {"rank": 0, "fabric_address": "192.168.201.11"},
        "spark2": {"rank": 1, "fabric_address": "192.168.200.11"},
        "spark3": {"rank": 2, "fabric_address": "192.168.200.13"},
        "spark4": {"rank": None, "fabric_address": None},
    }


def test_a_balancer_outside_the_fabric_reads_the_variable_it_names():
    hostvars = {"spark1": dict(ADDRESS_ONLY, engine_service_rank=0, ansible_host="10.0.0.1")}
    assert engine_hosts(["spark1"], hostvars, "ansible_host") == {"spark1": {"rank": 0, "fabric_address": "10.0.0.1"}}
