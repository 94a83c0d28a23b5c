# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""site.yml on a broken fabric fails clearly, naming host and cause: inventory
mistakes before any node changes, run-time faults with the fabric left as
configured (a re-run converges once the fault is gone)."""

from __future__ import annotations

import re
import subprocess

import pytest

from helpers import (
    completion,
    flat,
    group_vars,
    host_side_veth,
    inventory_hosts,
    node_file_digests,
    node_state,
    run_playbook,
)

testinfra_hosts = ["local://"]

GV = group_vars()
HOSTS = sorted(inventory_hosts())
NETWORK_FILES = [f"/etc/systemd/network/60-dgxspark-{GV['roce_fabric_netdev']}.network", "/etc/netplan/60-dgxspark-fabric.yaml"]


@pytest.fixture
def unchanged_nodes():
    before = node_file_digests(HOSTS, NETWORK_FILES)
    yield
    assert node_file_digests(HOSTS, NETWORK_FILES) == before, "a refused run changed a node"


INVENTORY_REFUSALS = {
    "missing HCA": (
        {"extra_vars": {"roce_fabric_hca": "roceP9p9s0f9"}},
        "spark1 has no RDMA device roceP9p9s0f9 under /run/dgxspark-sim/sysfs/class/infiniband (found: roceP2p1s0f1)",
    ),
    "MTU mismatch": (
        {"override": "spark3:\n      roce_fabric_mtu: 1500\n"},
        "roce_fabric_mtu differs between nodes (spark1=9000, spark2=9000, spark3=1500, spark4=9000)",
    ),
    "duplicate address": (
        {"override": "spark4:\n      roce_fabric_address: 192.168.100.12\n"},
        "address 192.168.100.12 is used by spark2 roce_fabric_links[0] and spark4 roce_fabric_links[0]",
    ),
}


@pytest.mark.parametrize("change, message", INVENTORY_REFUSALS.values(), ids=list(INVENTORY_REFUSALS))
def test_unsound_fabric_inventory_is_refused_before_any_change(change, message, tmp_path, unchanged_nodes):
    args = []
    if "override" in change:
        override = tmp_path / "override.yml"
        override.write_text("dgxspark_cluster:\n  hosts:\n    " + change["override"])
        args = ["-i", str(override)]
    result = run_playbook("site.yml", *args, extra_vars=change.get("extra_vars"))
    assert result.returncode != 0
    assert message in flat(result.stdout), flat(result.stdout)[-3000:]
    assert "Fabric | Write the" not in result.stdout


def test_address_without_gid_entry_fails_naming_host_and_table():
    hca, netdev, root = GV["roce_fabric_hca"], GV["roce_fabric_netdev"], GV["roce_fabric_sysfs_root"]
    # The kernel never published a GID for spark2's address: freeze the
    # stand-in with a table built for another address.
    node_state("spark2", "systemctl stop dgxspark-sim-rdma.service")
    try:
        node_state(
            "spark2",
            f"python3 /usr/local/bin/dgxspark-sim-cx7-sysfs --root {root} --hca {hca} --netdev {netdev} "
            "--address 192.168.100.212",
        )
        result = run_playbook("site.yml")
    finally:
        node_state("spark2", "systemctl start dgxspark-sim-rdma.service")
    assert result.returncode != 0
    output = flat(result.stdout)
    assert "spark2: no RoCE v2 GID for 192.168.100.12 on roceP2p1s0f1 port 1 (roce_fabric_address / roce_fabric_hca)" in output, output[-3000:]
    # The message carries the table the node does have.
    assert "(192.168.100.212), RoCE v2, netdev enP2p1s0f1np1" in output
    assert "spark1: no RoCE" not in output


def test_peer_dropping_jumbo_frames_is_named():
    veth = host_side_veth("spark4", GV["roce_fabric_netdev"])
    subprocess.run(["ip", "link", "set", veth, "mtu", "1500"], check=True)
    try:
        result = run_playbook("site.yml")
    finally:
        subprocess.run(["ip", "link", "set", veth, "mtu", str(GV["roce_fabric_mtu"])], check=True)
    assert result.returncode != 0
    output = flat(result.stdout)
    size = GV["roce_fabric_mtu"] - 28
    assert f"spark4 (192.168.100.14) does not answer a {size}-byte don't-fragment ping over {GV['roce_fabric_netdev']}" in output, output[-3000:]
    assert "every node and switch port on the path needs MTU 9000 (roce_fabric_mtu)" in output


ENGINE_START_TASKS = {"Engine | Start the worker ranks", "Engine | Start the head rank"}


def changed_tasks(output):
    """Names of the tasks that reported a change on some host."""
    names, task = set(), None
    for line in output.splitlines():
        header = re.match(r"^TASK \[(?:[\w.]+ : )?(.*)\] \**$", line)
        if header:
            task = header.group(1)
        elif line.startswith("changed: [") and task:
            names.add(task)
    return names


def test_site_converges_again_once_the_faults_are_gone():
    # While spark4's switch port dropped jumbo frames the engine's ranks could
    # not talk, so their watchdogs may have stopped them: then, and only then,
    # the re-run starts the ranks again, and changes nothing else.
    result = run_playbook("site.yml")
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    changed = changed_tasks(result.stdout)
    assert changed <= ENGINE_START_TASKS, changed
    if changed:
        assert "rank is not running" in flat(result.stdout)
    recap = [line for line in result.stdout.splitlines() if line.startswith("spark")]
    assert len(recap) == 4 and all("failed=0" in line for line in recap), recap
    assert completion()[0] == 200
