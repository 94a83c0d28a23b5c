# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""A node that already has a configuration for its fabric port (a netplan file of
NVIDIA's cluster setup, a NetworkManager connection): the preflight adopts one
that says what the inventory says, and refuses, naming the host and the file,
one that says otherwise or would make two managers own the port, before any
change. Only the fabric part runs (--tags fabric): a few seconds each."""

from __future__ import annotations

import pytest

from helpers import (
    NETWORK_FILES,
    assert_nothing_changed,
    flat,
    group_vars,
    inventory_hosts,
    node_file_digests,
    node_state,
    run_playbook,
)

testinfra_hosts = ["local://"]

GV = group_vars()
HOSTS = sorted(inventory_hosts())
NETDEV = GV["roce_fabric_netdev"]
MTU = GV["roce_fabric_mtu"]
CX7 = "/etc/netplan/40-cx7.yaml"
KEYFILE = "/etc/NetworkManager/system-connections/cx7.nmconnection"


def address(host):
    return inventory_hosts()[host]["roce_fabric_address"]


def netplan_file(addr):
    """The netplan file NVIDIA's DGX Spark cluster setup writes for a port half."""
    return (f"network:\n  version: 2\n  ethernets:\n    {NETDEV}:\n      dhcp4: no\n      dhcp6: no\n"
            f"      link-local: []\n      mtu: {MTU}\n      addresses: [{addr}/24]\n")


def put(host, path, text):
    """Write O(text) to O(path) on the node, root-only (mode 0600), as the tools write them."""
    node_state(host, f"mkdir -p $(dirname {path}) && umask 077 && cat > {path} <<'EOF'\n{text}EOF\nchmod 0600 {path}")


def fabric_run():
    before = node_file_digests(HOSTS, NETWORK_FILES)
    result = run_playbook("site.yml", "--tags", "fabric")
    return result, before


@pytest.fixture
def cx7_file():
    yield lambda addr: put("spark3", CX7, netplan_file(addr))
    node_state("spark3", f"rm -f {CX7}")


def test_a_netplan_file_that_says_otherwise_is_refused_naming_host_and_file(cx7_file):
    ours = address("spark3")
    cx7_file(ours.rsplit(".", 1)[0] + ".113")
    result, before = fabric_run()
    output = flat(result.stdout)
    assert result.returncode != 0
    assert (f"spark3: {CX7} configures {NETDEV} (roce_fabric_links[0]) as network.ethernets.{NETDEV} with addresses "
            f"{ours.rsplit('.', 1)[0]}.113/24, expected {ours}/24 (roce_fabric_links / roce_fabric_mtu). Remove that "
            "stanza (or the file)") in output, output[-3000:]
    assert "Fabric | Write the" not in result.stdout
    assert_nothing_changed(result)
    assert node_file_digests(HOSTS, NETWORK_FILES) == before


def test_a_netplan_file_that_says_the_same_is_adopted(cx7_file):
    ours = address("spark3")
    cx7_file(ours)
    result, before = fabric_run()
    output = flat(result.stdout)
    assert result.returncode == 0, output[-3000:]
    assert (f"spark3: {CX7} configures {NETDEV} (roce_fabric_links[0]) as network.ethernets.{NETDEV} with the same "
            f"values (addresses {ours}/24, mtu {MTU}): adopted") in output, output[-3000:]
    assert_nothing_changed(result)
    assert node_file_digests(HOSTS, NETWORK_FILES) == before


def test_a_networkmanager_connection_for_the_port_is_refused():
    created = node_state("spark1", "test -d /etc/NetworkManager && echo kept || echo created").strip() == "created"
    keyfile = (f"[connection]\nid=cx7\ntype=ethernet\ninterface-name={NETDEV}\n\n[ethernet]\nmtu={MTU}\n\n"
               f"[ipv4]\naddress1={address('spark1')}/24\nmethod=manual\n")
    try:
        put("spark1", KEYFILE, keyfile)
        result, before = fabric_run()
    finally:
        node_state("spark1", f"rm -f {KEYFILE}" + (" && rm -r /etc/NetworkManager" if created else ""))
    output = flat(result.stdout)
    assert result.returncode != 0
    assert (f"spark1: {KEYFILE} is a NetworkManager connection (id cx7) for {NETDEV} (roce_fabric_links[0]; it sets "
            f"address {address('spark1')}/24; mtu {MTU}), while this role configures it through systemd-networkd"
            ) in output, output[-3000:]
    assert "two managers would own one port" in output
    assert_nothing_changed(result)
    assert node_file_digests(HOSTS, NETWORK_FILES) == before
