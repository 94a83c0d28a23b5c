# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated nodes are shaped like Sparks: systemd, port2 netdev at MTU
9000 carrying the inventory's fabric address, jumbo frames between peers."""

from __future__ import annotations

import testinfra.utils.ansible_runner

from helpers import GROUP, INVENTORY, group_vars, inventory_hosts

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(str(INVENTORY)).get_hosts(GROUP)


def test_systemd_is_running(host):
    assert host.run("systemctl is-system-running").stdout.strip() == "running"


def test_port2_netdev_carries_the_inventory_address(host):
    name = host.backend.get_hostname()
    netdev = group_vars()["roce_fabric_netdev"]
    iface = host.interface(netdev)
    assert iface.exists
    assert f"{inventory_hosts()[name]['roce_fabric_address']}" in iface.addresses
    assert host.file(f"/sys/class/net/{netdev}/mtu").content_string.strip() == str(group_vars()["roce_fabric_mtu"])


def test_every_peer_answers_a_jumbo_frame(host):
    name = host.backend.get_hostname()
    size = group_vars()["roce_fabric_mtu"] - 28
    for peer, peer_vars in inventory_hosts().items():
        if peer == name:
            continue
        result = host.run(f"ping -c 1 -W 2 -M do -s {size} {peer_vars['roce_fabric_address']}")
        assert result.rc == 0, f"{name} -> {peer}: {result.stdout}{result.stderr}"


def test_gpu_query_stand_in_prints_a_gb10(host):
    out = host.check_output("nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader,nounits")
    assert out.strip() == "NVIDIA GB10, 12.1"
