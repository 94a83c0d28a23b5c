# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node that stands in for a DGX OS desktop install (sim_network_manager:
NetworkManager renders netplan, and NVIDIA's cluster setup already configured
the fabric port; molecule/resources/prepare_network_manager.yml): site.yml
adopted NVIDIA's file, wrote the role's own for NetworkManager and left the port
to NetworkManager alone (test_fabric.py checks the connection); a re-run of the
fabric part names the adopted file and changes nothing, and a second file that
would give the port to systemd-networkd is refused naming it."""

from __future__ import annotations

from helpers import assert_nothing_changed, flat, group_vars, inventory_hosts, node_state, run_playbook

testinfra_hosts = ["local://"]

GV = group_vars()
NETDEV = GV["roce_fabric_netdev"]
NODE = next(host for host, hostvars in sorted(inventory_hosts().items()) if hostvars.get("sim_network_manager"))
NVIDIA_FILE = "/etc/netplan/40-cx7-fabric.yaml"
OTHER_FILE = "/etc/netplan/45-dgxspark-test-networkd.yaml"


def test_networkmanager_alone_owns_the_port():
    # systemd-networkd renders nothing for the port and does not manage it (where it runs at all).
    assert node_state(NODE, f"test -e /run/systemd/network/10-netplan-{NETDEV}.network && echo two || echo one"
                      ).strip() == "one"
    networkd = node_state(NODE, "systemctl is-active systemd-networkd || true").strip()
    if networkd == "active":
        line = node_state(NODE, f"networkctl list --no-legend {NETDEV} || true")
        assert "unmanaged" in line, line
    # NetworkManager holds one connection for the port: netplan's, active.
    active = node_state(NODE, "nmcli -t -f NAME,DEVICE connection show --active").splitlines()
    assert [line for line in active if line.endswith(":" + NETDEV)] == [f"netplan-{NETDEV}:{NETDEV}"], active


def test_a_fabric_rerun_names_the_adopted_file_and_changes_nothing():
    result = run_playbook("site.yml", "--tags", "fabric")
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    out = flat(result.stdout)
    assert (f"{NODE}: {NVIDIA_FILE} configures {NETDEV} (roce_fabric_links[0]) as network.ethernets.{NETDEV} with the "
            f"same values (addresses {inventory_hosts()[NODE]['roce_fabric_address']}/{GV['roce_fabric_prefix']}, "
            f"mtu {GV['roce_fabric_mtu']}): adopted") in out, out[-3000:]
    assert_nothing_changed(result)


def test_a_file_giving_the_port_to_networkd_is_refused_naming_it():
    node_state(NODE, f"umask 077 && printf 'network:\\n  version: 2\\n  ethernets:\\n    {NETDEV}:\\n      "
                     f"renderer: networkd\\n      mtu: {GV['roce_fabric_mtu']}\\n' > {OTHER_FILE}")
    try:
        result = run_playbook("site.yml", "--tags", "fabric")
    finally:
        node_state(NODE, f"rm -f {OTHER_FILE}")
    assert result.returncode != 0
    out = flat(result.stdout)
    assert (f"{NODE}: {OTHER_FILE} configures {NETDEV} (roce_fabric_links[0]) as network.ethernets.{NETDEV} with "
            f"renderer networkd, while this role configures it through netplan (renderer NetworkManager, "
            f"/etc/netplan/60-dgxspark-fabric.yaml): two managers would own one port.") in out, out[-3000:]
    assert "changed=1" not in out
    # Refused before any change: the port is still NetworkManager's.
    assert node_state(NODE, f"nmcli -g GENERAL.CONNECTION device show {NETDEV}").strip() == f"netplan-{NETDEV}"
