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
    NETWORK_FILES,
    assert_nothing_changed,
    batched_refusals,
    completion,
    flat,
    group_vars,
    host_side_veth,
    inventory_hosts,
    node_file_digests,
    node_state,
    run_playbook,
    selected_cases,
)

testinfra_hosts = ["local://"]

GV = group_vars()
HOSTS = sorted(inventory_hosts())


# The node's management interface (the one holding its ansible_host), looked up
# on spark1 when a case names it: Docker, not the inventory, names it.
MANAGEMENT_NETDEV = "<management netdev>"
# Every node's fabric address moved into the management network 192.168.99.0/24,
# so that the plan stays sound and the node check is what refuses it.
IN_MANAGEMENT_SUBNET = "".join(
    f"{host}:\n      roce_fabric_address: 192.168.99.{50 + index}\n    " for index, host in enumerate(HOSTS, 1)
)

INVENTORY_REFUSALS = {
    "missing HCA": (
        {"extra_vars": {"roce_fabric_hca": "roceP9p9s0f9"}},
        "spark1 has no RDMA device roceP9p9s0f9 under /run/dgxspark-sim/sysfs/class/infiniband (found: roceP2p1s0f0, roceP2p1s0f1)",
    ),
    "MTU mismatch": (
        {"override": "spark3:\n      roce_fabric_mtu: 1500\n"},
        "roce_fabric_mtu differs between nodes (spark1=9000, spark2=9000, spark3=1500, spark4=9000)",
    ),
    "duplicate address": (
        {"override": "spark4:\n      roce_fabric_address: 192.168.100.12\n"},
        "address 192.168.100.12 is used by spark2 roce_fabric_links[0] and spark4 roce_fabric_links[0]",
    ),
    "management netdev": (
        {"extra_vars": {"roce_fabric_netdev": MANAGEMENT_NETDEV}},
        f"spark1: roce_fabric_links[0] netdev {MANAGEMENT_NETDEV} carries 192.168.99.11, the address Ansible reaches "
        "spark1 through (ansible_host); a fabric netdev gets a static address and would cut the node off. Set "
        "roce_fabric_netdev to the ConnectX-7 port of the fabric (e.g. enP2p1s0f1np1).",
    ),
    "address in the management subnet": (
        {"override": IN_MANAGEMENT_SUBNET},
        "spark1: roce_fabric_links[0] address 192.168.99.51 is inside the management subnet 192.168.99.0/24 (",
    ),
    "subnet overlapping the management subnet": (
        {"extra_vars": {"roce_fabric_prefix": 16}},
        "spark1: roce_fabric_links[0] subnet 192.168.0.0/16 (address 192.168.100.11, prefix 16) overlaps the "
        "management subnet 192.168.99.0/24 (",
    ),
    # The stand-in's second RDMA function (prepare.yml: --sibling) belongs to enP2p1s0f0np0.
    "HCA of another netdev": (
        {"extra_vars": {"roce_fabric_hca": "roceP2p1s0f0"}},
        "spark1: roce_fabric_links[0] pairs hca roceP2p1s0f0 with netdev enP2p1s0f1np1, but roceP2p1s0f0 is the RDMA "
        "device of enP2p1s0f0np0 (sysfs /run/dgxspark-sim/sysfs/class/infiniband/roceP2p1s0f0/device/net/). Set the "
        "hca of that link to the device of enP2p1s0f1np1: roceP2p1s0f1.",
    ),
    "links given as a mapping": (
        {"extra_vars": {"roce_fabric_links": {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1",
                                              "address": "192.168.100.11", "prefix": 24}}},
        # The role's argument spec refuses it first, in the preflight play (the
        # fabric_plan_problems message, unit-tested, covers paths without a spec).
        "argument 'roce_fabric_links' is of type dict and we were unable to convert to list",
    ),
}


def management_netdev(host="spark1"):
    """The interface of the node that holds its ansible_host."""
    address = inventory_hosts()[host]["ansible_host"]
    return node_state(host, f"ip -o -4 addr show to {address}").split()[1]


def filled(value, names):
    """O(value) with each placeholder of O(names) replaced, in strings, lists, tuples and dicts."""
    if isinstance(value, str):
        for placeholder, name in names.items():
            value = value.replace(placeholder, name)
        return value
    if isinstance(value, dict):
        return {key: filled(item, names) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(filled(item, names) for item in value)
    return value


def filled_case(case):
    """The case's (change, message), the management netdev's placeholder filled in."""
    change, message = INVENTORY_REFUSALS[case]
    if MANAGEMENT_NETDEV in repr(change) + message:
        change, message = filled((change, message), {MANAGEMENT_NETDEV: management_netdev()})
    return change, message


# Cases one run carries together (helpers.batched_refusals): the plan check names every
# problem of the plan, and the node check, which judges only a sound plan, every problem of
# the nodes, except that a missing RDMA device hides the subnet's. Cases that set one
# variable, or whose messages name a value another case changes, go to different runs; the
# links given as a mapping stop at the role's argument spec, before either check.
BATCHES = (
    ("MTU mismatch", "duplicate address"),
    ("missing HCA", "management netdev"),
    ("HCA of another netdev", "subnet overlapping the management subnet"),
)


@pytest.fixture(scope="module")
def refused(request, tmp_path_factory):
    """The selected cases' site.yml runs, several cases to a run and the runs side by side
    (each is refused before any change): {case: CompletedProcess}. The network files are
    read before and after the whole batch."""
    changes = {}
    for case in selected_cases(request, "test_unsound_fabric_inventory_is_refused_before_any_change"):
        change, _message = filled_case(case)
        changes[case] = change.get("override", change.get("extra_vars"))
    before = node_file_digests(HOSTS, NETWORK_FILES)
    results = batched_refusals(changes, BATCHES, tmp_path_factory)
    assert node_file_digests(HOSTS, NETWORK_FILES) == before, "a refused run changed a node"
    return results


@pytest.mark.parametrize("case", list(INVENTORY_REFUSALS))
def test_unsound_fabric_inventory_is_refused_before_any_change(case, refused):
    _change, message = filled_case(case)
    result = refused[case]
    assert result.returncode != 0
    assert message in flat(result.stdout), flat(result.stdout)[-3000:]
    assert "Fabric | Write the" not in result.stdout
    assert_nothing_changed(result)


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
