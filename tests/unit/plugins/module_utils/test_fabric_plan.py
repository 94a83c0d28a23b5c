# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import copy

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._fabric_plan import (
    counters_by_hca,
    fabric_plan_problems,
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
        (mutated("spark4", l0__address="192.168.200.14"),
         "roce_fabric_links[0] is not on one subnet across nodes (192.168.100.0/24: spark1, spark2, spark3; 192.168.200.0/24: spark4)"),
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
