# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roce_fabric role's derived variables, templated by ansible-core as a play
templates them: a mistyped roce_fabric_links reaches validate.yml's assert (whose
filters name it) instead of failing earlier, in the read's variables.

Each case runs in a subprocess with the collection loader installed, so that the
role's dgxspark.cluster.* filters resolve as they do in a play."""

from __future__ import annotations

import json

import pytest

from unit_support import template_role_vars

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_state import check_spec, parse_read

CASES = []


def case(variables, **expressions):
    """Register a case; its result is read with result(index) once every case has run."""
    CASES.append((variables, expressions))
    return len(CASES) - 1


@pytest.fixture(scope="module")
def results():
    """Every case in one ansible-core start (about 1.5 s)."""
    return template_role_vars("roce_fabric", CASES)


HOST = {"inventory_hostname": "spark1", "roce_fabric_address": "192.168.100.11"}
LINK = {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": "192.168.100.11", "prefix": 24}
MAPPING = (
    "spark1: roce_fabric_links is a mapping (keys: address, hca, netdev, prefix); expected a list of links, each a "
    "mapping with netdev, hca, address and prefix. Write it as a YAML list of mappings"
)


READ_SPEC = "{{ roce_fabric_read_spec }}"
DEFAULTS = case(HOST, files="{{ roce_fabric_networkd_files }}", management="{{ roce_fabric_management }}",
                read=READ_SPEC)
WITH_ANSIBLE_HOST = case(dict(HOST, ansible_host="192.168.99.11"), management="{{ roce_fabric_management }}")


def test_the_default_links_read_their_networkd_file_and_name_the_management_path(results):
    assert results[DEFAULTS]["files"] == ["/etc/systemd/network/60-dgxspark-enP2p1s0f1np1.network"]
    assert results[DEFAULTS]["management"] == {"address": "spark1", "variable": "inventory_hostname"}
    assert results[DEFAULTS]["read"]["paths"] == [
        "/usr/sbin/netplan", "/etc/netplan/60-dgxspark-fabric.yaml", "/etc/systemd/network/60-dgxspark-enP2p1s0f1np1.network"]
    assert results[DEFAULTS]["read"]["commands"]["hcas"][-1] == "/sys/class/infiniband"
    # The spec is one node_read can run (paths absolute, command names words).
    assert check_spec(results[DEFAULTS]["read"])["units"] == ["systemd-networkd.service", "NetworkManager.service"]
    assert results[WITH_ANSIBLE_HOST]["management"] == {"address": "192.168.99.11", "variable": "ansible_host"}


MISTYPED = [
    (LINK, MAPPING),
    ("enP2p1s0f1np1", "spark1: roce_fabric_links is a string ('enP2p1s0f1np1'); expected a list of links"),
    (7, "spark1: roce_fabric_links is a number (7); expected a list of links"),
    ([{"hca": "roceP2p1s0f1", "address": "192.168.100.11", "prefix": 24}],
     "spark1: roce_fabric_links[0] has no netdev; set it in the inventory"),
    ([dict(LINK, netdev=["a", "b"])], "spark1: roce_fabric_links[0] netdev is a list (2 items); expected one"),
]
MISTYPED_CASES = [
    (case(dict(HOST, roce_fabric_links=links), read=READ_SPEC,
          problems="{{ {inventory_hostname: roce_fabric_planned} | dgxspark.cluster.fabric_plan_problems }}"), expected)
    for links, expected in MISTYPED
]


@pytest.mark.parametrize("index, expected", MISTYPED_CASES,
                         ids=["mapping", "string", "number", "no netdev", "netdev list"])
def test_mistyped_links_get_as_far_as_the_plan_check(results, index, expected):
    out = results[index]
    assert out["read"]["paths"] == ["/usr/sbin/netplan", "/etc/netplan/60-dgxspark-fabric.yaml"]
    assert any(problem.startswith(expected) for problem in out["problems"]), out["problems"]


# What the configs command prints (fabric_config_read_argv): NVIDIA's cluster
# setup file for the port, the default link's values.
CX7_NETPLAN = ("network:\n  version: 2\n  ethernets:\n    enP2p1s0f1np1:\n      dhcp4: no\n      mtu: 9000\n"
               "      addresses: [192.168.100.11/24]\n")
CONFIGS = json.dumps({"netplan": {"/etc/netplan/40-cx7.yaml": CX7_NETPLAN}, "keyfiles": {}, "nm_devices": None})
READ = {
    "stdout": "\n".join([  # noqa: FLY002  # one item per line of the read
        "@@dgxspark-state path 0", "stat 755 0 0 root root regular file", "sha256 x",
        "@@dgxspark-state path 1", "@@dgxspark-state path 2",
        "@@dgxspark-state unit 0", "enabled 0 enabled", "active 0 active",
        "@@dgxspark-state unit 1", "enabled 1 disabled", "active 3 inactive",
        "@@dgxspark-state command netdevs", "enP2p1s0f1np1", "eth0", "lo", "", "@@dgxspark-state rc 0",
        "@@dgxspark-state command hcas", "roceP2p1s0f0 enP2p1s0f0np0", "roceP2p1s0f1 enP2p1s0f1np1", "",
        "@@dgxspark-state rc 0",
        "@@dgxspark-state command configs", CONFIGS, "", "@@dgxspark-state rc 0",
        "@@dgxspark-state end", "",
    ]),
    "stderr": "",
}
FACTS = {"interfaces": ["eth0", "lo", "enP2p1s0f1np1"], "default_ipv4": {},
         "eth0": {"device": "eth0", "ipv4": {"address": "192.168.99.11", "netmask": "255.255.255.0"}},
         "enP2p1s0f1np1": {"device": "enP2p1s0f1np1"}}
# validate.yml's expression, as the task has it.
NODE_PROBLEMS = ("{{ roce_fabric_links | dgxspark.cluster.fabric_node_problems(inventory_hostname, "
                 "roce_fabric_node_found, ansible_facts, roce_fabric_management) + "
                 "roce_fabric_config_verdict['problems'] }}")
# What dgxspark.cluster.node_read registers for READ (validate.yml's task), for the spec of the default link.
SPEC = {"paths": ["/usr/sbin/netplan", "/etc/netplan/60-dgxspark-fabric.yaml",
                  "/etc/systemd/network/60-dgxspark-enP2p1s0f1np1.network"],
        "units": ["systemd-networkd.service", "NetworkManager.service"], "commands": {"netdevs": ["ls"], "hcas": ["sh"], "configs": ["python3"]}}
NODE = dict(HOST, roce_fabric_node_state=parse_read(READ, SPEC), ansible_facts=FACTS, ansible_host="192.168.99.11")
SOUND_NODE = case(NODE, problems=NODE_PROBLEMS)
MANAGEMENT_NETDEV = case(dict(NODE, roce_fabric_netdev="eth0"), problems=NODE_PROBLEMS)
SIBLING_HCA = case(dict(NODE, roce_fabric_hca="roceP2p1s0f0"), problems=NODE_PROBLEMS)
MANAGEMENT_SUBNET = case(dict(NODE, roce_fabric_address="192.168.99.50"), problems=NODE_PROBLEMS)
NETPLAN = case(dict(NODE, roce_fabric_backend="netplan"), problems=NODE_PROBLEMS)
NO_NETPLAN = dict(NODE, roce_fabric_node_state=parse_read(dict(READ, stdout=READ["stdout"].replace(
    "stat 755 0 0 root root regular file\nsha256 x\n", "")), SPEC))
NETPLAN_MISSING = case(dict(NO_NETPLAN, roce_fabric_backend="netplan"), problems=NODE_PROBLEMS)
AUTO_WITHOUT_NETPLAN = case(NO_NETPLAN, problems=NODE_PROBLEMS)
ADOPTED = case(NODE, verdict="{{ roce_fabric_config_verdict }}", spec=READ_SPEC)
OTHER_ADDRESS = case(dict(NODE, roce_fabric_address="192.168.100.21"), problems=NODE_PROBLEMS)
KEYFILE = json.dumps({"netplan": {}, "nm_devices": None, "keyfiles": {
    "/etc/NetworkManager/system-connections/cx7.nmconnection": "[connection]\nid=cx7\ninterface-name=enP2p1s0f1np1\n"}})
NM_KEYFILE = case(dict(NO_NETPLAN, roce_fabric_node_state=parse_read(dict(READ, stdout=READ["stdout"].replace(
    "stat 755 0 0 root root regular file\nsha256 x\n", "").replace(CONFIGS, KEYFILE)), SPEC)), problems=NODE_PROBLEMS)


def test_the_existing_configurations_are_read_and_judged_with_the_node(results):
    configs = results[ADOPTED]["spec"]["commands"]["configs"]
    assert configs[:2] == ["python3", "-c"] and configs[-1] == "/etc/netplan/60-dgxspark-fabric.yaml"
    assert results[ADOPTED]["verdict"] == {"problems": [], "adopted": [
        "spark1: /etc/netplan/40-cx7.yaml configures enP2p1s0f1np1 (roce_fabric_links[0]) as "
        "network.ethernets.enP2p1s0f1np1 with the same values (addresses 192.168.100.11/24, mtu 9000): adopted, "
        "left as it is; the role's configuration carries the same values."]}
    assert results[OTHER_ADDRESS]["problems"] == [
        "spark1: /etc/netplan/40-cx7.yaml configures enP2p1s0f1np1 (roce_fabric_links[0]) as "
        "network.ethernets.enP2p1s0f1np1 with addresses 192.168.100.11/24, expected 192.168.100.21/24 "
        "(roce_fabric_links / roce_fabric_mtu). Remove that stanza (or the file) so that the role's "
        "/etc/netplan/60-dgxspark-fabric.yaml configures the port, or set roce_fabric_links and roce_fabric_mtu to "
        "what it says."
    ]
    # Without netplan the netplan file counts for nothing; the keyfile is refused with the networkd backend named.
    assert results[NM_KEYFILE]["problems"] == [
        "spark1: /etc/NetworkManager/system-connections/cx7.nmconnection is a NetworkManager connection (id cx7) for "
        "enP2p1s0f1np1 (roce_fabric_links[0]), while this role configures it through systemd-networkd "
        "(/etc/systemd/network): two managers would own one port. Delete it (nmcli connection delete 'cx7', or "
        "remove the file), or set roce_fabric_links to another port."
    ]


# NetworkManager runs (unit 1 active): auto renders the links through it.
NM_READ = dict(READ, stdout=READ["stdout"].replace("enabled 1 disabled\nactive 3 inactive",
                                                   "enabled 0 enabled\nactive 0 active"))
NM_NODE = dict(NODE, roce_fabric_node_state=parse_read(NM_READ, SPEC))
RENDERED = {"renderer": "{{ roce_fabric_link_owner }}", "running": "{{ roce_fabric_renderer_running }}",
            "netplan": "{{ roce_fabric_netplan_content }}", "problems": NODE_PROBLEMS}
NM_AUTO = case(NM_NODE, **RENDERED)
NM_ASKED_FOR_NETWORKD = case(dict(NM_NODE, roce_fabric_renderer="networkd"), **RENDERED)
NM_NOT_RUNNING = case(dict(NODE, roce_fabric_renderer="NetworkManager"), **RENDERED)
NM_WITH_NETWORKD_FILES = case(dict(NM_NODE, roce_fabric_backend="networkd"), **RENDERED)
NETWORKD_AUTO = case(NODE, **RENDERED)


def test_the_renderer_follows_networkmanager_and_its_netplan_files(results):
    assert results[NETWORKD_AUTO]["renderer"] == "networkd" and results[NETWORKD_AUTO]["running"] is True
    assert "renderer: networkd" in results[NETWORKD_AUTO]["netplan"]
    out = results[NM_AUTO]
    assert out["renderer"] == "NetworkManager" and out["running"] is True
    assert "renderer: NetworkManager" in out["netplan"] and "renderer: networkd" not in out["netplan"]
    # The node's own netplan file (CONFIGS) renders for networkd: the other manager, refused.
    assert len(out["problems"]) == 1 and "with renderer networkd, while this role configures it through netplan " \
        "(renderer NetworkManager, /etc/netplan/60-dgxspark-fabric.yaml)" in out["problems"][0]
    assert results[NM_ASKED_FOR_NETWORKD]["renderer"] == "networkd"
    assert results[NM_ASKED_FOR_NETWORKD]["problems"] == []
    assert results[NM_NOT_RUNNING]["running"] is False
    # The node's problem first, then its networkd netplan file, which the asked-for renderer refuses.
    assert results[NM_NOT_RUNNING]["problems"][0] == (
        "spark1: roce_fabric_renderer is NetworkManager but NetworkManager.service does not run; start it "
        "(systemctl enable --now NetworkManager) or set roce_fabric_renderer to auto or networkd.")
    assert len(results[NM_NOT_RUNNING]["problems"]) == 2
    assert results[NM_WITH_NETWORKD_FILES]["problems"][0].startswith(
        "spark1: NetworkManager runs on the node (roce_fabric_renderer auto picks it), but roce_fabric_backend "
        "writes systemd-networkd files")


def test_validate_yml_node_problems_template_from_a_read(results):
    assert results[SOUND_NODE]["problems"] == []
    assert results[NETPLAN]["problems"] == []  # /usr/sbin/netplan (path 0) was found
    assert results[AUTO_WITHOUT_NETPLAN]["problems"] == []
    assert results[NETPLAN_MISSING]["problems"] == [
        "spark1: roce_fabric_backend is netplan but /usr/sbin/netplan is missing; install netplan.io or set "
        "roce_fabric_backend to auto or networkd."
    ]
    assert results[MANAGEMENT_NETDEV]["problems"][0].startswith(
        "spark1: roce_fabric_links[0] netdev eth0 carries 192.168.99.11, the address Ansible reaches spark1 through "
        "(ansible_host)")
    assert results[SIBLING_HCA]["problems"] == [
        "spark1: roce_fabric_links[0] pairs hca roceP2p1s0f0 with netdev enP2p1s0f1np1, but roceP2p1s0f0 is the RDMA "
        "device of enP2p1s0f0np0 (sysfs /sys/class/infiniband/roceP2p1s0f0/device/net/). Set the hca of that link "
        "to the device of enP2p1s0f1np1: roceP2p1s0f1."
    ]
    # The node's netplan file (CONFIGS) has the old address: named after the node's own problems.
    assert len(results[MANAGEMENT_SUBNET]["problems"]) == 2
    assert "/etc/netplan/40-cx7.yaml" in results[MANAGEMENT_SUBNET]["problems"][1]
    assert results[MANAGEMENT_SUBNET]["problems"][:1] == [
        "spark1: roce_fabric_links[0] address 192.168.99.50 is inside the management subnet 192.168.99.0/24 (eth0: "
        "ansible_host 192.168.99.11); two interfaces on one subnet would let management traffic leave over the "
        "fabric. Set roce_fabric_address (or the address of that link) in a subnet of the fabric's own, outside "
        "192.168.99.0/24."
    ]
