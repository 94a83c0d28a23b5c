# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""What site.yml left on the fabric: configured links, per-node GID indexes
read independently from the RDMA tree, other interfaces untouched, and the
full-mesh report on the controller."""

from __future__ import annotations

import ipaddress
import json

import testinfra.utils.ansible_runner
import yaml

from helpers import GROUP, INVENTORY, ROOT, group_vars, inventory_hosts

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(str(INVENTORY)).get_hosts(GROUP)

GV = group_vars()


def _name(host):
    return host.backend.get_hostname()


def test_the_chosen_backend_owns_the_fabric_link(host):
    name = _name(host)
    netdev = GV["roce_fabric_netdev"]
    address = f"{inventory_hosts()[name]['roce_fabric_address']}/{GV['roce_fabric_prefix']}"
    networkd = host.file(f"/etc/systemd/network/60-dgxspark-{netdev}.network")
    netplan = host.file("/etc/netplan/60-dgxspark-fabric.yaml")
    if inventory_hosts()[name].get("roce_fabric_backend") == "networkd":
        assert networkd.exists and networkd.mode == 0o644 and not netplan.exists
        assert f"Address={address}" in networkd.content_string
        assert "LinkLocalAddressing=no" in networkd.content_string
        assert host.service("systemd-networkd").is_enabled
        return
    # netplan is installed, so auto picks it; netplan renders for networkd, or for
    # NetworkManager where it runs (spark4), and only one of them owns the port.
    assert netplan.exists and netplan.mode == 0o600 and not networkd.exists
    plan = yaml.safe_load(netplan.content_string)["network"]["ethernets"][netdev]
    assert plan["addresses"] == [address] and plan["mtu"] == GV["roce_fabric_mtu"] and plan["link-local"] == []
    for_networkd = host.file(f"/run/systemd/network/10-netplan-{netdev}.network")
    for_nm = host.file(f"/run/NetworkManager/system-connections/netplan-{netdev}.nmconnection")
    if inventory_hosts()[name].get("sim_network_manager"):
        assert plan["renderer"] == "NetworkManager"
        assert for_nm.exists and f"address1={address}" in for_nm.content_string and not for_networkd.exists
        shown = host.check_output(f"nmcli -g GENERAL.CONNECTION,GENERAL.STATE device show {netdev}").splitlines()
        assert shown == [f"netplan-{netdev}", "100 (connected)"], shown
    else:
        assert plan["renderer"] == "networkd"
        assert for_networkd.exists and f"Address={address}" in for_networkd.content_string and not for_nm.exists
        assert host.service("systemd-networkd").is_enabled


def test_fabric_link_has_address_and_jumbo_mtu(host):
    netdev = GV["roce_fabric_netdev"]
    shown = json.loads(host.check_output(f"ip -j addr show dev {netdev}"))[0]
    assert shown["mtu"] == GV["roce_fabric_mtu"]
    inet = [a["local"] for a in shown["addr_info"] if a["family"] == "inet"]
    assert inet == [inventory_hosts()[_name(host)]["roce_fabric_address"]]
    assert not [a for a in shown["addr_info"] if a["family"] == "inet6"], "link-local address left on the fabric link"


def test_management_interface_is_untouched(host):
    shown = json.loads(host.check_output("ip -j addr show"))
    mgmt = [i for i in shown if any(a.get("local", "").startswith("192.168.99.") for a in i["addr_info"])]
    assert len(mgmt) == 1
    assert mgmt[0]["mtu"] == 1500
    assert not host.file(f"/etc/systemd/network/60-dgxspark-{mgmt[0]['ifname']}.network").exists


def _raw_gid_index(host, address):
    """The slot of the RoCE v2 GID of an IPv4 address, read straight from the tree."""
    ports = f"{GV['roce_fabric_sysfs_root']}/class/infiniband/{GV['roce_fabric_hca']}/ports/1"
    mapped = ipaddress.IPv6Address("::ffff:" + address).exploded
    wanted = ":".join(mapped.replace(":", "")[i:i + 4] for i in range(0, 32, 4))
    for line in host.check_output(f"grep -H . {ports}/gids/*").splitlines():
        path, gid = line.rsplit(":", 8)[0], ":".join(line.rsplit(":", 8)[1:])
        index = path.rsplit("/", 1)[1]
        if gid == wanted and host.file(f"{ports}/gid_attrs/types/{index}").content_string.strip() == "RoCE v2":
            return int(index)
    raise AssertionError(f"{address} not in the GID table")


def test_gid_module_finds_the_slot_of_this_node_address(host):
    address = inventory_hosts()[_name(host)]["roce_fabric_address"]
    found = host.ansible(
        "dgxspark.cluster.roce_gid",
        f"hca={GV['roce_fabric_hca']} address={address} sysfs_root={GV['roce_fabric_sysfs_root']}",
        check=False,
    )
    assert found["index"] == _raw_gid_index(host, address)
    assert found["type"] == "RoCE v2" and found["netdev"] == GV["roce_fabric_netdev"]
    assert found["port"]["active_mtu"] == 4096


def test_report_holds_a_full_four_by_four_mesh_in_three_rounds():
    report = json.loads((ROOT / "reports" / "fabric" / "fabric-report.json").read_text())
    hosts = sorted(inventory_hosts())
    assert sorted(report["hosts"]) == hosts
    assert report["passed"] is True and report["violations"] == []
    assert len(report["rounds"]) == 3 and report["metadata"]["rounds"] == 3
    for test in ("ping", "iperf3"):
        matrix = report["matrices"][test]
        cells = [(s, d) for s in hosts for d in hosts if s != d]
        assert all("error" not in matrix[s][d] for s, d in cells), matrix
        assert report["summaries"][test]["measured"] == 12
    assert all(matrix_cell["received_gbps"] > 0.1 for row in report["matrices"]["iperf3"].values() for matrix_cell in row.values())
    markdown = (ROOT / "reports" / "fabric" / "fabric-report.md").read_text()
    assert "| FROM\\TO | spark1 | spark2 | spark3 | spark4 |" in markdown
