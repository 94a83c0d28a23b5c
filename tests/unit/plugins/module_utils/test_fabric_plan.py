# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._fabric_plan import (
    counters_by_hca,
    fabric_plan_problems,
    link_states,
    ping_targets,
)


def node(*addresses, mtu=9000, prefix=24):
    names = [("enP2p1s0f1np1", "roceP2p1s0f1"), ("enp1s0f1np1", "rocep1s0f1")]
    return {
        "mtu": mtu,
        "links": [
            {"netdev": names[i][0], "hca": names[i][1], "address": a, "prefix": prefix}
            for i, a in enumerate(addresses)
        ],
    }


SOUND = {
    "spark%d" % i: node("192.168.100.%d" % (10 + i), "192.168.101.%d" % (10 + i)) for i in range(1, 5)
}


def test_sound_plan_has_no_problems():
    assert fabric_plan_problems(SOUND) == []


def mutated(host, **changes):
    plan = copy.deepcopy(SOUND)
    for key, value in changes.items():
        if key == "mtu":
            plan[host]["mtu"] = value
        else:
            position, field = key.split("__")
            plan[host]["links"][int(position[1:])][field] = value
    return plan


@pytest.mark.parametrize(
    "plan, expected",
    [
        (mutated("spark3", mtu=1500), "roce_fabric_mtu differs between nodes (spark1=9000, spark2=9000, spark3=1500, spark4=9000)"),
        (mutated("spark2", mtu=100000), "spark2: roce_fabric_mtu 100000 is outside 1280-9216"),
        (mutated("spark2", mtu="jumbo"), "spark2: roce_fabric_mtu 'jumbo' is not a number"),
        (mutated("spark2", l0__address="192.168.100.11"), "address 192.168.100.11 is used by spark1 roce_fabric_links[0] and spark2 roce_fabric_links[0]"),
        (mutated("spark4", l0__address="192.168.200.14"), "roce_fabric_links[0] is not on one subnet across nodes (192.168.100.0/24: spark1, spark2, spark3; 192.168.200.0/24: spark4)"),
        (mutated("spark1", l1__address="192.168.100.21"), "spark1: roce_fabric_links[0] and [1] share subnet 192.168.100.0/24"),
        (mutated("spark1", l0__address="192.168.100.300"), "spark1: roce_fabric_links[0] address '192.168.100.300' is not an IPv4 address"),
        (mutated("spark1", l0__address="192.168.100.255"), "spark1: roce_fabric_links[0] address 192.168.100.255 is the network or broadcast address"),
        (mutated("spark1", l0__prefix=40), "spark1: roce_fabric_links[0] prefix 40 is not an IPv4 prefix length"),
        (mutated("spark1", l1__hca=""), "spark1: roce_fabric_links[1] has no hca"),
    ],
)
def test_each_unsound_plan_is_named(plan, expected):
    problems = fabric_plan_problems(plan)
    assert any(expected in p for p in problems), problems


def test_different_link_counts_are_refused():
    plan = copy.deepcopy(SOUND)
    plan["spark2"]["links"].pop()
    problems = fabric_plan_problems(plan)
    assert any("different numbers of fabric links (spark1=2, spark2=1, spark3=2, spark4=2)" in p for p in problems)


def test_empty_links_are_refused():
    problems = fabric_plan_problems({"spark1": {"mtu": 9000, "links": []}})
    assert problems == ["spark1: roce_fabric_links is empty; give the node at least one fabric link"]


def ip_show(ifname, mtu, addresses, lower_up=True):
    flags = ["BROADCAST", "MULTICAST", "UP"] + (["LOWER_UP"] if lower_up else [])
    addr_info = [{"family": "inet", "local": a, "prefixlen": 24} for a in addresses]
    return json.dumps([{"ifname": ifname, "mtu": mtu, "flags": flags, "addr_info": addr_info}])


LINK = {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": "192.168.100.11", "prefix": 24}


@pytest.mark.parametrize(
    "stdout, carrier, configured",
    [
        (ip_show("enP2p1s0f1np1", 9000, ["192.168.100.11"]), True, True),
        (ip_show("enP2p1s0f1np1", 1500, ["192.168.100.11"]), True, False),
        (ip_show("enP2p1s0f1np1", 9000, ["192.168.100.99"]), True, False),
        (ip_show("enP2p1s0f1np1", 9000, [], lower_up=False), False, False),
        ("", False, False),
        ("not json", False, False),
    ],
)
def test_link_states_read_carrier_and_configuration(stdout, carrier, configured):
    (state,) = link_states([{"item": LINK, "stdout": stdout}], 9000)
    assert (state["carrier"], state["configured"]) == (carrier, configured)
    assert (state["ifname"], state["hca"], state["address"]) == ("enP2p1s0f1np1", "roceP2p1s0f1", "192.168.100.11")


def test_link_states_ignore_ipv6_addresses():
    stdout = json.dumps([{"ifname": "x", "mtu": 9000, "flags": ["LOWER_UP"],
                          "addr_info": [{"family": "inet6", "local": "fe80::1"}, {"family": "inet", "local": "10.0.0.1"}]}])
    (state,) = link_states([{"item": {"address": "10.0.0.1"}, "stdout": stdout}], "9000")
    assert state["addresses"] == ["10.0.0.1"] and state["configured"]


def _state(ifname, address, carrier=True):
    return {"ifname": ifname, "address": address, "carrier": carrier}


def test_ping_targets_pair_links_by_position_and_need_carrier_on_both_ends():
    hostvars = {
        "a": {"roce_fabric_link_state": [_state("f0", "10.0.0.1"), _state("f1", "10.0.1.1")]},
        "b": {"roce_fabric_link_state": [_state("f0", "10.0.0.2"), _state("f1", "10.0.1.2", carrier=False)]},
        "c": {"roce_fabric_link_state": [_state("f0", "10.0.0.3"), _state("f1", "10.0.1.3")]},
    }
    assert ping_targets(["a", "b", "c"], hostvars, "a") == [
        {"peer": "b", "netdev": "f0", "address": "10.0.0.2"},
        {"peer": "c", "netdev": "f0", "address": "10.0.0.3"},
        {"peer": "c", "netdev": "f1", "address": "10.0.1.3"},
    ]
    assert ping_targets(["a", "b", "c"], hostvars, "b") == [
        {"peer": "a", "netdev": "f0", "address": "10.0.0.1"},
        {"peer": "c", "netdev": "f0", "address": "10.0.0.3"},
    ]


def test_ping_targets_of_a_host_without_state_are_empty():
    assert ping_targets(["a", "b"], {"a": {}, "b": {"roce_fabric_link_state": [_state("f0", "10.0.0.2")]}}, "a") == []


def test_counters_by_hca_names_each_counter_after_its_hca():
    results = [
        {"item": {"hca": "rocep1s0f1"}, "counters": {"symbol_error": 0, "link_downed": 2}},
        {"item": {"hca": "roceP2p1s0f1"}, "counters": {"symbol_error": 5}},
    ]
    assert counters_by_hca(results) == {
        "rocep1s0f1/symbol_error": 0,
        "rocep1s0f1/link_downed": 2,
        "roceP2p1s0f1/symbol_error": 5,
    }
