# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fabric plan filters: registered, documented, the module_utils functions
underneath, and mistyped links reach the play as messages, never as a Python
error such as "'str' object has no attribute 'get'"."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter import fabric_links, fabric_plan, fabric_schedule
from ansible_collections.dgxspark.cluster.plugins.module_utils._fabric_links import FabricLinkError, ping_plan
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_plan import (
    FabricPlanError,
    fabric_plan_problems,
    node_problems,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_schedule import FabricScheduleError

FILTER_DIR = Path(fabric_plan.__file__).parent
FILTERS = fabric_plan.FilterModule().filters()
LINK = {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": "192.168.100.11", "prefix": 24}
PLANS = {"spark1": {"mtu": 9000, "links": [LINK]},
         "spark2": {"mtu": 9000, "links": [dict(LINK, address="192.168.100.12")]}}
FOUND = {"netdevs": ["enP2p1s0f1np1", "eth0", "lo"], "hcas": {"roceP2p1s0f1": ["enP2p1s0f1np1"]},
         "sysfs_root": "/sys", "netplan_missing": False}
FACTS = {"interfaces": ["eth0", "lo", "enP2p1s0f1np1"], "default_ipv4": {},
         "eth0": {"device": "eth0", "ipv4": {"address": "192.168.99.11", "netmask": "255.255.255.0"}},
         "enP2p1s0f1np1": {"device": "enP2p1s0f1np1"}}
MANAGEMENT = {"address": "192.168.99.11", "variable": "ansible_host"}
MAPPING_MESSAGE = "spark1: roce_fabric_links is a mapping (keys: address, hca, netdev, prefix); expected a list of links"


def test_the_filters_are_registered_and_documented():
    assert sorted(FILTERS) == ["fabric_config_problems", "fabric_config_read_argv", "fabric_counters_by_hca",
                               "fabric_node_problems", "fabric_plan_problems"]
    for name in FILTERS:
        doc = yaml.safe_load((FILTER_DIR / (name + ".yml")).read_text())
        assert doc["DOCUMENTATION"]["name"] == name
    positional = yaml.safe_load((FILTER_DIR / "fabric_node_problems.yml").read_text())["DOCUMENTATION"]["positional"]
    assert [word.strip() for word in positional.split(",")] == ["host", "found", "facts", "management"]


def test_the_filters_are_the_module_utils_functions():
    assert FILTERS["fabric_plan_problems"](PLANS) == fabric_plan_problems(PLANS) == []
    links = [dict(LINK, netdev="eth0")]
    assert FILTERS["fabric_node_problems"](links, "spark1", FOUND, FACTS, MANAGEMENT) == node_problems(
        "spark1", links, FOUND, FACTS, MANAGEMENT)
    assert any("netdev eth0 carries 192.168.99.11" in p
               for p in FILTERS["fabric_node_problems"](links, "spark1", FOUND, FACTS, MANAGEMENT))
    assert FILTERS["fabric_node_problems"]([LINK], "spark1", FOUND) == []


def test_the_config_filter_returns_problems_and_adopted_as_a_mapping():
    netplan = {"/etc/netplan/40-cx7.yaml": "network: {version: 2, ethernets: {enP2p1s0f1np1: {mtu: 1500}}}"}
    verdict = FILTERS["fabric_config_problems"]([LINK], "spark1", 9000, {"netplan": netplan, "keyfiles": {}})
    assert verdict["adopted"] == []
    assert [p[:60] for p in verdict["problems"]] == [
        "spark1: /etc/netplan/40-cx7.yaml configures enP2p1s0f1np1 (r"]
    argv = FILTERS["fabric_config_read_argv"]("/etc/netplan/60-dgxspark-fabric.yaml")
    assert argv[:2] == ["python3", "-c"] and argv[-1] == "/etc/netplan/60-dgxspark-fabric.yaml"
    positional = yaml.safe_load((FILTER_DIR / "fabric_config_problems.yml").read_text())["DOCUMENTATION"]["positional"]
    assert [word.strip() for word in positional.split(",")] == ["host", "mtu", "found", "context"]


@pytest.mark.parametrize(
    "name, args",
    [
        ("fabric_plan_problems", (["spark1"],)),
        ("fabric_node_problems", ([LINK], "spark1", "nothing found")),
    ],
)
def test_errors_become_filter_errors_with_the_same_message(name, args):
    with pytest.raises(AnsibleFilterError) as raised:
        FILTERS[name](*args)
    assert isinstance(raised.value.orig_exc, FabricPlanError)
    assert raised.value.message == str(raised.value.orig_exc)


def test_links_given_as_a_mapping_are_a_problem_of_the_plan():
    plans = dict(PLANS, spark1={"mtu": 9000, "links": LINK})
    problems = FILTERS["fabric_plan_problems"](plans)
    assert len(problems) == 1 and problems[0].startswith(MAPPING_MESSAGE)


@pytest.mark.parametrize(
    "links",
    [LINK, "enP2p1s0f1np1", ["enP2p1s0f1np1"], [dict(LINK, netdev=["a"])]],
    ids=["mapping", "string", "list of strings", "netdev list"],
)
def test_the_link_filters_refuse_mistyped_links_with_a_message(links):
    """verify.yml publishes the plan without validate.yml's checks; the ping plan
    and the report's digest name the mistake instead of failing in Python."""
    plans = dict(PLANS, spark1={"mtu": 9000, "links": links})
    ping = fabric_links.FilterModule().filters()["fabric_ping_plan"]
    digest = fabric_schedule.FilterModule().filters()["fabric_plan_digest"]
    for function, error in ((ping, FabricLinkError), (digest, FabricScheduleError)):
        with pytest.raises(AnsibleFilterError) as raised:
            function(plans, *(["spark2"] if function is ping else [{}]))
        assert isinstance(raised.value.orig_exc, error)
        assert raised.value.message.startswith("spark1: roce_fabric_links"), raised.value.message
        assert "has no attribute" not in raised.value.message


def test_the_ping_plan_filter_is_ping_plan_for_sound_plans():
    assert fabric_links.FilterModule().filters()["fabric_ping_plan"](PLANS, "spark1") == ping_plan(PLANS, "spark1")
