# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ConnectX-7 sysfs stand-in lays out each HCA's device and netdev as a real
node does (class/infiniband/<hca>/device -> the PCI function, whose net/ names
the netdev), and the roce_fabric role's read finds each HCA's netdev in it.

GID tables and the rest of the tree are tested with GID discovery
(tests/unit/plugins/module_utils/test__roce_gid.py)."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from unit_support import REPO_ROOT, load_cx7_standin

from ansible_collections.dgxspark.cluster.plugins.module_utils._roce_gid import read_gid_table, read_port_info
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_plan import node_problems, parse_hca_netdevs
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_state import parse_read, read_command

cx7 = load_cx7_standin()

HCA = "roceP2p1s0f1"
NETDEV = "enP2p1s0f1np1"
SIBLING = "roceP2p1s0f0=enP2p1s0f0np0"
MAC = "4c:bb:47:00:11:22"
ROLE_VARS = REPO_ROOT / "roles" / "roce_fabric" / "vars" / "main.yml"


@pytest.fixture
def tree(tmp_path):
    """Build a stand-in tree for HCA/NETDEV; returns a function taking sync_tree's options."""
    net_dir = tmp_path / "net"
    (net_dir / NETDEV).mkdir(parents=True)
    (net_dir / NETDEV / "mtu").write_text("9000\n")
    root = tmp_path / "sys"

    def build(hca=HCA, netdev=NETDEV, **options):
        cx7.sync_tree(root, hca, 1, netdev, MAC, ["192.168.100.11/24"], table_size=8, net_dir=net_dir, **options)
        return root

    return build


@pytest.mark.parametrize(
    "hca, expected",
    [
        ("roceP2p1s0f1", "devices/pci0002:00/0002:00:00.0/0002:01:00.1"),
        ("rocep1s0f1", "devices/pci0000:00/0000:00:00.0/0000:01:00.1"),
        ("roceP2p1s0f0", "devices/pci0002:00/0002:00:00.0/0002:01:00.0"),
        ("roceP12p10s3", "devices/pci000c:00/000c:00:00.0/000c:0a:03.0"),
        ("mlx5_0", "devices/pci0000:00/0000:00:00.0/standin-mlx5_0"),
    ],
)
def test_the_pci_function_comes_from_the_hca_name(hca, expected):
    assert cx7.pci_function_dir(hca) == expected


def test_device_is_a_relative_link_to_the_pci_function_holding_the_netdev(tree):
    root = tree()
    device = root / "class" / "infiniband" / HCA / "device"
    assert device.is_symlink()
    assert os.readlink(device) == "../../../devices/pci0002:00/0002:00:00.0/0002:01:00.1"
    assert os.listdir(device / "net") == [NETDEV]
    # Through the netdev's link the node's own netdev is read, as on a real node.
    assert (device / "net" / NETDEV / "mtu").read_text() == "9000\n"
    assert read_port_info(root, HCA, 1)["netdev_mtu"] == 9000


def test_a_sibling_function_has_its_own_device_netdev_and_a_down_port(tree):
    root = tree(siblings=[SIBLING])
    infiniband = root / "class" / "infiniband"
    assert sorted(os.listdir(infiniband)) == ["roceP2p1s0f0", "roceP2p1s0f1"]
    assert os.listdir(infiniband / "roceP2p1s0f0" / "device" / "net") == ["enP2p1s0f0np0"]
    assert os.listdir(infiniband / HCA / "device" / "net") == [NETDEV]
    port = infiniband / "roceP2p1s0f0" / "ports" / "1"
    assert (port / "state").read_text() == "1: DOWN\n"
    assert (port / "link_layer").read_text() == "Ethernet\n"
    assert not (port / "gids").exists()
    # The main function's GID table is untouched by its sibling.
    assert read_gid_table(root, HCA, 1)[0]["netdev"] == NETDEV


@pytest.mark.parametrize(
    "sibling, message",
    [
        ("roceP2p1s0f0", "expected HCA=NETDEV"),
        ("=enP2p1s0f0np0", "expected HCA=NETDEV"),
        ("roceP2p1s0f1=enP2p1s0f0np0", "names the PCI function of roceP2p1s0f1"),
    ],
)
def test_a_bad_sibling_is_refused(tree, sibling, message):
    with pytest.raises(cx7.StandinError, match=message):
        tree(siblings=[sibling])


def test_a_tree_of_the_earlier_layout_is_moved_to_the_pci_layout(tree):
    root = tree()
    device = root / "class" / "infiniband" / HCA / "device"
    device.unlink()
    (device / "net").mkdir(parents=True)
    (device / "net" / NETDEV).symlink_to(root / "class" / "net" / NETDEV)
    tree()
    assert device.is_symlink() and os.listdir(device / "net") == [NETDEV]


def test_a_rerun_keeps_the_links(tree):
    root = tree(siblings=[SIBLING])
    device = root / "class" / "infiniband" / HCA / "device"
    before = os.lstat(device).st_ino
    tree(siblings=[SIBLING])
    assert os.lstat(device).st_ino == before


def test_the_cli_takes_siblings(tmp_path):
    root = tmp_path / "sys"
    argv = ["--root", str(root), "--hca", HCA, "--netdev", NETDEV, "--mac", MAC, "--address", "192.168.100.11",
            "--net-dir", str(tmp_path), "--table-size", "8", "--sibling", SIBLING, "--sibling", "rocep1s0f1=enp1s0f1np1"]
    assert cx7.main(argv) == 0
    assert sorted(os.listdir(root / "class" / "infiniband")) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f1"]


def test_the_cli_refuses_a_bad_sibling_before_writing(tmp_path, capsys):
    argv = ["--root", str(tmp_path / "sys"), "--hca", HCA, "--netdev", NETDEV, "--mac", MAC, "--address",
            "192.168.100.11", "--sibling", "roceP2p1s0f0"]
    assert cx7.main(argv) == 2
    assert "expected HCA=NETDEV" in capsys.readouterr().err
    assert not (tmp_path / "sys").exists()


def role_read_spec(sysfs_root):
    """The roce_fabric role's read spec with the sysfs root filled in (the rest is not read here)."""
    spec = yaml.safe_load(ROLE_VARS.read_text())["roce_fabric_read_spec"]
    hcas = [arg.replace("{{ roce_fabric_sysfs_root }}", str(sysfs_root)) for arg in spec["commands"]["hcas"]]
    return {"commands": {"netdevs": ["ls", "-1A", str(sysfs_root / "class" / "net") + "/"], "hcas": hcas}}


def read_node(spec):
    done = subprocess.run(read_command(spec), shell=True, capture_output=True, text=True, check=False)
    return parse_read({"stdout": done.stdout, "stderr": done.stderr}, spec)


def test_the_role_read_lists_the_netdev_of_every_hca(tree):
    root = tree(siblings=[SIBLING])
    state = read_node(role_read_spec(root))
    assert state["commands"]["hcas"]["rc"] == 0
    assert parse_hca_netdevs(state["commands"]["hcas"]) == {
        "roceP2p1s0f0": ["enP2p1s0f0np0"],
        HCA: [NETDEV],
    }


def test_the_role_read_of_a_node_without_rdma_devices_lists_none(tmp_path):
    state = read_node(role_read_spec(tmp_path / "nothing"))
    assert state["commands"]["hcas"]["rc"] != 0
    assert parse_hca_netdevs(state["commands"]["hcas"]) == {}


def test_pairing_the_netdev_with_the_sibling_is_refused_from_the_read(tree):
    root = tree(siblings=[SIBLING])
    state = read_node(role_read_spec(root))
    found = {"netdevs": [NETDEV, "eth0", "lo"], "hcas": state["commands"]["hcas"], "sysfs_root": str(root)}
    link = {"netdev": NETDEV, "hca": "roceP2p1s0f0", "address": "192.168.100.11", "prefix": 24}
    assert node_problems("spark1", [link], found) == [
        "spark1: roce_fabric_links[0] pairs hca roceP2p1s0f0 with netdev enP2p1s0f1np1, but roceP2p1s0f0 is the RDMA "
        "device of enP2p1s0f0np0 (sysfs %s/class/infiniband/roceP2p1s0f0/device/net/). Set the hca of that link to "
        "the device of enP2p1s0f1np1: roceP2p1s0f1." % root
    ]
    assert node_problems("spark1", [dict(link, hca=HCA)], found) == []
