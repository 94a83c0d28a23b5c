# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import copy
import ipaddress

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_plan import (
    FabricPlanError,
    counters_by_hca,
    fabric_plan_problems,
    links_shape_problems,
    node_problems,
    parse_hca_netdevs,
    plans_shape_problems,
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


# --- The shape of roce_fabric_links: a message, never a Python error ----------

LINK = {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": "192.168.100.11", "prefix": 24}
LINKS_FIX = (
    "Write it as a YAML list of mappings, e.g. roce_fabric_links: [{netdev: enP2p1s0f1np1, hca: roceP2p1s0f1, "
    "address: 192.168.200.11, prefix: 24}], or leave it unset and set roce_fabric_netdev, roce_fabric_hca "
    "and roce_fabric_address."
)


@pytest.mark.parametrize(
    "links, expected",
    [
        (LINK, "spark1: roce_fabric_links is a mapping (keys: address, hca, netdev, prefix); expected a list of "
               "links, each a mapping with netdev, hca, address and prefix. " + LINKS_FIX),
        ("enP2p1s0f1np1", "spark1: roce_fabric_links is a string ('enP2p1s0f1np1'); expected a list of links, each "
                          "a mapping with netdev, hca, address and prefix. " + LINKS_FIX),
        (7, "spark1: roce_fabric_links is a number (7); expected a list of links, each a mapping with netdev, hca, "
            "address and prefix. " + LINKS_FIX),
        (["enP2p1s0f1np1"], "spark1: roce_fabric_links[0] is a string ('enP2p1s0f1np1'); expected a mapping with "
                            "netdev, hca, address and prefix. " + LINKS_FIX),
        ([LINK, ["a", "b"]], "spark1: roce_fabric_links[1] is a list (2 items); expected a mapping with netdev, hca, "
                             "address and prefix. " + LINKS_FIX),
        ([dict(LINK, netdev=["enP2p1s0f1np1", "enp1s0f1np1"])],
         "spark1: roce_fabric_links[0] netdev is a list (2 items); expected one network interface name, e.g. "
         "enP2p1s0f1np1. Set roce_fabric_netdev (or the netdev of that link) to the name 'ip link' shows."),
        ([dict(LINK, hca=3)],
         "spark1: roce_fabric_links[0] hca is a number (3); expected one RDMA device name, e.g. roceP2p1s0f1. Set "
         "roce_fabric_hca (or the hca of that link) to the name under /sys/class/infiniband."),
    ],
)
def test_mistyped_links_are_named_with_the_fix(links, expected):
    assert links_shape_problems("spark1", links) == [expected]
    # The plan check names them too, and goes on with the other nodes.
    plan = copy.deepcopy(SOUND)
    plan["spark1"]["links"] = links
    problems = fabric_plan_problems(plan)
    assert expected in problems
    # A node whose links are no list has no link count to compare.
    if not isinstance(links, list):
        assert not any("different numbers of fabric links" in p for p in problems)


def test_a_link_without_netdev_is_named_not_raised():
    plan = copy.deepcopy(SOUND)
    del plan["spark2"]["links"][0]["netdev"]
    assert "spark2: roce_fabric_links[0] has no netdev; set it in the inventory" in fabric_plan_problems(plan)


def test_empty_or_missing_links_are_not_a_shape_problem():
    assert links_shape_problems("spark1", None) == []
    assert links_shape_problems("spark1", []) == []
    assert links_shape_problems("spark1", [LINK]) == []
    assert fabric_plan_problems({"spark1": {"mtu": 9000, "links": None}}) == [
        "spark1: roce_fabric_links is empty; give the node at least one fabric link"
    ]


def test_a_node_plan_that_is_no_mapping_is_named():
    plan = copy.deepcopy(SOUND)
    plan["spark3"] = "links"
    problems = fabric_plan_problems(plan)
    assert problems == [
        "spark3: roce_fabric_node_plan is a string ('links'); expected a mapping with mtu and links, as "
        "roce_fabric's validate.yml publishes it"
    ]


def test_plan_that_is_no_mapping_raises_the_plan_error():
    with pytest.raises(FabricPlanError, match="must map each host"):
        fabric_plan_problems(["spark1"])


def test_plans_shape_problems_covers_every_host():
    plans = {"spark1": {"links": LINK}, "spark2": {"links": [LINK]}, "spark3": None, "spark4": 5}
    problems = plans_shape_problems(plans)
    assert [p.split(":")[0] for p in problems] == ["spark1", "spark4"]
    assert plans_shape_problems([]) == [
        "the fabric plan is a list; expected a mapping of each host to its roce_fabric_node_plan ({mtu, links})"
    ]


# --- One node's links against what the node has --------------------------------

SYSFS = "/run/dgxspark-sim/sysfs"
FOUND = {
    "netdevs": ["docker0", "enP2p1s0f1np1", "eth0", "lo"],
    "hcas": {"roceP2p1s0f0": ["enP2p1s0f0np0"], "roceP2p1s0f1": ["enP2p1s0f1np1"]},
    "sysfs_root": SYSFS,
    "netplan_missing": False,
}
MANAGEMENT = {"address": "10.0.0.11", "variable": "ansible_host"}


def iface(device, address=None, netmask="255.255.255.0", secondaries=(), ipv6=()):
    entry = {"device": device, "active": True, "mtu": 1500}
    if address:
        network = str(ipaddress.IPv4Interface("%s/%s" % (address, netmask)).network.network_address)
        entry["ipv4"] = {"address": address, "netmask": netmask, "network": network, "broadcast": "",
                         "prefix": str(ipaddress.IPv4Network("0.0.0.0/%s" % netmask).prefixlen)}
    if secondaries:
        entry["ipv4_secondaries"] = [{"address": a, "netmask": netmask} for a in secondaries]
    if ipv6:
        entry["ipv6"] = [{"address": a, "prefix": "64", "scope": "global"} for a in ipv6]
    return entry


def facts(*entries, default="eth0", gateway="10.0.0.1"):
    """ansible_facts as the network subset gathers them: fact keys have '-' as '_'."""
    result = {"interfaces": [e["device"] for e in entries], "default_ipv4": {}}
    for entry in entries:
        result[entry["device"].replace("-", "_")] = entry
    if default:
        primary = next(e for e in entries if e["device"] == default)["ipv4"]
        result["default_ipv4"] = dict(primary, interface=default, gateway=gateway, alias=default)
    return result


NODE = facts(iface("eth0", "10.0.0.11"), iface("enP2p1s0f1np1", "192.168.100.11"), iface("lo", "127.0.0.1", "255.0.0.0"),
             iface("docker0", "172.17.0.1", "255.255.0.0"))


_DEFAULT = object()


def problems_of(link=None, found=_DEFAULT, node_facts=_DEFAULT, management=_DEFAULT, **changes):
    """node_problems of spark1 with one link; FOUND, NODE and MANAGEMENT unless given (None is a value)."""
    return node_problems("spark1", [dict(link or LINK, **changes)], FOUND if found is _DEFAULT else found,
                         NODE if node_facts is _DEFAULT else node_facts,
                         MANAGEMENT if management is _DEFAULT else management)


def test_a_node_that_has_its_links_has_no_problems():
    assert problems_of() == []


def test_a_missing_netdev_keeps_its_message():
    assert problems_of(netdev="enP9p9s0f9np9", address="192.168.100.99") == [
        "spark1 has no network interface enP9p9s0f9np9 (roce_fabric_links / roce_fabric_netdev). Interfaces "
        "present: docker0, enP2p1s0f1np1, eth0, lo."
    ]


def test_a_missing_hca_keeps_its_message():
    assert problems_of(hca="roceP9p9s0f9") == [
        "spark1 has no RDMA device roceP9p9s0f9 under /run/dgxspark-sim/sysfs/class/infiniband (found: "
        "roceP2p1s0f0, roceP2p1s0f1). Set roce_fabric_hca (or the hca of roce_fabric_links) to the device of "
        "enP2p1s0f1np1; check that the mlx5 driver is loaded."
    ]


def test_no_rdma_device_at_all_says_none():
    found = dict(FOUND, hcas={"rc": 2, "stdout": "", "stderr": "cd: can't cd"})
    assert problems_of(found=found) == [
        "spark1 has no RDMA device roceP2p1s0f1 under /run/dgxspark-sim/sysfs/class/infiniband (found: none). "
        "Set roce_fabric_hca (or the hca of roce_fabric_links) to the device of enP2p1s0f1np1; check that the "
        "mlx5 driver is loaded."
    ]


def test_names_are_listed_as_jinja_sorts_them_case_insensitively():
    found = dict(FOUND, netdevs={"rc": 0, "stdout": "lo\nenp1s0f1np1\nenP2p1s0f1np1\nEth9\n"},
                 hcas={"rc": 0, "stdout": "rocep1s0f1 enp1s0f1np1\nroceP2p1s0f1 enP2p1s0f1np1\n"})
    problems = problems_of(found=found, netdev="x", hca="y")
    assert "Interfaces present: enp1s0f1np1, enP2p1s0f1np1, Eth9, lo." in problems[0]
    assert "(found: rocep1s0f1, roceP2p1s0f1)" in problems[1]


def test_an_address_already_on_another_interface_keeps_its_message():
    node = facts(iface("eth0", "10.0.0.11"), iface("enP2p1s0f1np1"), iface("br-fab", "192.168.100.11"))
    assert problems_of(node_facts=node) == [
        "spark1: fabric address 192.168.100.11 for enP2p1s0f1np1 is already on br-fab. Remove it there or choose "
        "another roce_fabric_address."
    ]


def test_a_secondary_address_is_taken_too():
    node = facts(iface("eth0", "10.0.0.11"), iface("enP2p1s0f1np1"), iface("dummy0", "10.9.9.9", secondaries=["192.168.100.11"]))
    assert problems_of(node_facts=node) == [
        "spark1: fabric address 192.168.100.11 for enP2p1s0f1np1 is already on dummy0. Remove it there or choose "
        "another roce_fabric_address."
    ]


def test_the_netplan_backend_without_netplan_keeps_its_message():
    assert problems_of(found=dict(FOUND, netplan_missing=True)) == [
        "spark1: roce_fabric_backend is netplan but /usr/sbin/netplan is missing; install netplan.io or set "
        "roce_fabric_backend to auto or networkd."
    ]
    assert problems_of(found=dict(FOUND, netplan_missing="False")) == []


def test_networkmanager_renders_only_where_it_runs_and_only_through_netplan():
    nm = dict(FOUND, renderer="NetworkManager", renderer_setting="auto", nm_running=True, use_netplan=True)
    assert problems_of(found=nm) == []
    assert problems_of(found=dict(nm, renderer="networkd", nm_running=False)) == []
    assert problems_of(found=dict(nm, renderer_setting="NetworkManager", nm_running="False")) == [
        "spark1: roce_fabric_renderer is NetworkManager but NetworkManager.service does not run; start it "
        "(systemctl enable --now NetworkManager) or set roce_fabric_renderer to auto or networkd."
    ]
    assert problems_of(found=dict(nm, use_netplan=False)) == [
        "spark1: NetworkManager runs on the node (roce_fabric_renderer auto picks it), but roce_fabric_backend "
        "writes systemd-networkd files, which NetworkManager does not read: two managers would own the fabric "
        "ports. Set roce_fabric_backend to auto or netplan (netplan writes the links for NetworkManager), or set "
        "roce_fabric_renderer to networkd after marking the ports unmanaged in NetworkManager (an "
        "unmanaged-devices=interface-name:<netdev> entry under /etc/NetworkManager/conf.d/)."
    ]
    named = problems_of(found=dict(nm, use_netplan=False, renderer_setting="NetworkManager"))
    assert len(named) == 1 and named[0].startswith("spark1: roce_fabric_renderer is NetworkManager, but")


def test_an_hca_of_another_netdev_names_the_right_device():
    found = dict(FOUND, netdevs=FOUND["netdevs"] + ["enP2p1s0f0np0"])
    assert problems_of(found=found, netdev="enP2p1s0f0np0", address="192.168.101.11") == [
        "spark1: roce_fabric_links[0] pairs hca roceP2p1s0f1 with netdev enP2p1s0f0np0, but roceP2p1s0f1 is the "
        "RDMA device of enP2p1s0f1np1 (sysfs /run/dgxspark-sim/sysfs/class/infiniband/roceP2p1s0f1/device/net/). "
        "Set the hca of that link to the device of enP2p1s0f0np0: roceP2p1s0f0."
    ]


def test_an_hca_of_another_netdev_when_no_device_has_the_netdev():
    assert problems_of(hca="roceP2p1s0f0") == [
        "spark1: roce_fabric_links[0] pairs hca roceP2p1s0f0 with netdev enP2p1s0f1np1, but roceP2p1s0f0 is the "
        "RDMA device of enP2p1s0f0np0 (sysfs /run/dgxspark-sim/sysfs/class/infiniband/roceP2p1s0f0/device/net/). "
        "Set the hca of that link to the device of enP2p1s0f1np1: roceP2p1s0f1."
    ]
    found = dict(FOUND, hcas={"roceP2p1s0f0": ["enP2p1s0f0np0"], "roceP2p1s0f1": []})
    assert problems_of(found=found, hca="roceP2p1s0f0") == [
        "spark1: roce_fabric_links[0] pairs hca roceP2p1s0f0 with netdev enP2p1s0f1np1, but roceP2p1s0f0 is the "
        "RDMA device of enP2p1s0f0np0 (sysfs /run/dgxspark-sim/sysfs/class/infiniband/roceP2p1s0f0/device/net/). "
        "Set the hca of that link to the device of enP2p1s0f1np1: no RDMA device under "
        "/run/dgxspark-sim/sysfs/class/infiniband lists it (found: roceP2p1s0f0 (enP2p1s0f0np0), roceP2p1s0f1 "
        "(no netdev)); check the netdev too."
    ]


def test_an_hca_whose_netdevs_cannot_be_listed_is_not_judged():
    found = dict(FOUND, hcas={"roceP2p1s0f1": []})
    assert problems_of(found=found) == []
    # Several netdevs (switchdev representors): the link's netdev among them is enough.
    found = dict(FOUND, hcas={"roceP2p1s0f1": ["enP2p1s0f1np1", "pf0vf0"]})
    assert problems_of(found=found) == []


def test_a_missing_netdev_is_not_also_called_a_mismatch():
    problems = problems_of(netdev="enP2p1s0f0np0", address="192.168.101.11")
    assert len(problems) == 1 and problems[0].startswith("spark1 has no network interface enP2p1s0f0np0")


def test_the_netdev_ansible_connects_through_is_refused():
    problems = problems_of(netdev="eth0", hca="roceP2p1s0f1")
    assert (
        "spark1: roce_fabric_links[0] netdev eth0 carries 10.0.0.11, the address Ansible reaches spark1 through "
        "(ansible_host); a fabric netdev gets a static address and would cut the node off. Set roce_fabric_netdev "
        "to the ConnectX-7 port of the fabric (e.g. enP2p1s0f1np1)."
    ) in problems
    # Its own subnet is not named again, nor its default route, nor the pairing of its HCA.
    assert not any("management subnet" in p or "default route" in p or " pairs hca " in p for p in problems)


def test_the_inventory_hostname_as_address_is_named_so():
    problems = problems_of(netdev="eth0", management={"address": "10.0.0.11", "variable": "inventory_hostname"})
    assert any("carries 10.0.0.11, the address Ansible reaches spark1 through (inventory_hostname)" in p
               for p in problems)


def test_the_default_route_netdev_is_refused():
    node = facts(iface("wlan0", "10.0.0.11"), iface("enP7s7", "172.16.5.20"), iface("enP2p1s0f1np1"),
                 default="enP7s7", gateway="172.16.5.1")
    problems = problems_of(node_facts=node, netdev="enP7s7", found=dict(FOUND, netdevs=["enP7s7", "enP2p1s0f1np1"]),
                           hca="roceP9")
    assert (
        "spark1: roce_fabric_links[0] netdev enP7s7 is the interface of the node's default route (ansible_facts "
        "default_ipv4, via 172.16.5.1); a fabric netdev gets a static address without a gateway and would take "
        "the default route away. Set roce_fabric_netdev to the ConnectX-7 port of the fabric (e.g. enP2p1s0f1np1)."
    ) in problems


def test_a_fabric_address_inside_the_management_subnet_is_refused():
    assert problems_of(address="10.0.0.50") == [
        "spark1: roce_fabric_links[0] address 10.0.0.50 is inside the management subnet 10.0.0.0/24 (eth0: "
        "ansible_host 10.0.0.11, default route); two interfaces on one subnet would let management traffic leave "
        "over the fabric. Set roce_fabric_address (or the address of that link) in a subnet of the fabric's own, "
        "outside 10.0.0.0/24."
    ]


def test_a_fabric_subnet_overlapping_the_management_subnet_is_refused():
    node = facts(iface("eth0", "192.168.99.11"), iface("enP2p1s0f1np1", "192.168.100.11"), default=None)
    management = {"address": "192.168.99.11", "variable": "ansible_host"}
    assert problems_of(node_facts=node, management=management, prefix=16) == [
        "spark1: roce_fabric_links[0] subnet 192.168.0.0/16 (address 192.168.100.11, prefix 16) overlaps the "
        "management subnet 192.168.99.0/24 (eth0: ansible_host 192.168.99.11); two interfaces on one subnet would "
        "let management traffic leave over the fabric. Set roce_fabric_prefix (or the prefix of that link) so that "
        "the fabric subnet leaves out 192.168.99.0/24, or move the fabric to another subnet."
    ]


def test_the_default_route_subnet_counts_when_ansible_host_is_a_hostname():
    management = {"address": "spark1.lab.example", "variable": "ansible_host"}
    problems = problems_of(management=management, address="10.0.0.77")
    assert problems == [
        "spark1: roce_fabric_links[0] address 10.0.0.77 is inside the management subnet 10.0.0.0/24 (eth0: "
        "default route); two interfaces on one subnet would let management traffic leave over the fabric. Set "
        "roce_fabric_address (or the address of that link) in a subnet of the fabric's own, outside 10.0.0.0/24."
    ]
    # A hostname is never resolved: no interface is said to carry it.
    problems = problems_of(management=management, netdev="eth0", address="192.168.100.11")
    assert not any("carries" in p for p in problems)
    assert any("netdev eth0 is the interface of the node's default route" in p for p in problems)


def test_a_node_without_default_route_is_judged_on_ansible_host_alone():
    node = facts(iface("eth0", "10.0.0.11"), iface("enP2p1s0f1np1"), default=None)
    assert problems_of(node_facts=node) == []
    assert len(problems_of(node_facts=node, address="10.0.0.60")) == 1
    hostname = {"address": "spark1", "variable": "inventory_hostname"}
    assert problems_of(node_facts=node, management=hostname, address="10.0.0.60") == []


def test_an_ipv6_ansible_host_is_found_on_its_interface():
    node = facts(iface("eth0", "10.0.0.11", ipv6=["2001:db8::11"]), iface("enP2p1s0f1np1"), default=None)
    problems = problems_of(node_facts=node, netdev="eth0", management={"address": "2001:db8::11", "variable": "ansible_host"})
    assert any("netdev eth0 carries 2001:db8::11, the address Ansible reaches spark1 through" in p for p in problems)


def test_without_facts_the_management_checks_are_left_out():
    assert problems_of(node_facts={}, address="10.0.0.50") == []
    assert problems_of(node_facts=None, netdev="eth0", hca="roceP2p1s0f1") == [
        "spark1: roce_fabric_links[0] pairs hca roceP2p1s0f1 with netdev eth0, but roceP2p1s0f1 is the RDMA device of "
        "enP2p1s0f1np1 (sysfs /run/dgxspark-sim/sysfs/class/infiniband/roceP2p1s0f1/device/net/). Set the hca of "
        "that link to the device of eth0: no RDMA device under /run/dgxspark-sim/sysfs/class/infiniband lists it "
        "(found: roceP2p1s0f0 (enP2p1s0f0np0), roceP2p1s0f1 (enP2p1s0f1np1)); check the netdev too."
    ]


def test_mistyped_links_are_left_to_the_plan_check():
    assert node_problems("spark1", LINK, FOUND, NODE, MANAGEMENT) == []
    assert node_problems("spark1", ["x", dict(LINK, netdev=None), dict(LINK, hca=[1])], FOUND, NODE, MANAGEMENT) == []


def test_found_of_the_wrong_shape_raises_the_plan_error():
    with pytest.raises(FabricPlanError, match="found is a list"):
        node_problems("spark1", [LINK], [], NODE, MANAGEMENT)
    with pytest.raises(FabricPlanError, match="found netdevs is a string"):
        node_problems("spark1", [LINK], dict(FOUND, netdevs="eth0 lo"), NODE, MANAGEMENT)


@pytest.mark.parametrize(
    "value, expected",
    [
        ({"rc": 0, "stdout": "roceP2p1s0f0 enP2p1s0f0np0\nroceP2p1s0f1 enP2p1s0f1np1\nmlx5_9\n"},
         {"roceP2p1s0f0": ["enP2p1s0f0np0"], "roceP2p1s0f1": ["enP2p1s0f1np1"], "mlx5_9": []}),
        ({"rc": 2, "stdout": ""}, {}),
        (["rocep1s0f1 a b"], {"rocep1s0f1": ["a", "b"]}),
        ({"rocep1s0f1": "enp1s0f1np1", "x": None}, {"rocep1s0f1": ["enp1s0f1np1"], "x": []}),
        (None, {}),
    ],
)
def test_parse_hca_netdevs(value, expected):
    assert parse_hca_netdevs(value) == expected
