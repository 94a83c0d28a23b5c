# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""GID discovery against trees written by the ConnectX-7 sysfs stand-in."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from types import MappingProxyType

import pytest

from unit_support import REPO_ROOT, load_cx7_standin

from ansible_collections.dgxspark.cluster.plugins.module_utils import _roce_gid
from ansible_collections.dgxspark.cluster.plugins.module_utils._roce_gid import (
    AddressOnOtherNetdevError,
    GidNotFoundError,
    HcaNotFoundError,
    PortNotFoundError,
    RoceGidError,
    main,
    read_gid_table,
    read_port_counters,
    read_port_info,
    roce_path_mtu,
    select_gid,
)

ROCE_GID_SCRIPT = REPO_ROOT / "plugins" / "module_utils" / "_roce_gid.py"


cx7 = load_cx7_standin()

HCA = "rocep1s0f1"
NETDEV = "enp1s0f1np1"
MAC = "4c:bb:47:00:11:22"
DEFAULT_GID = "fe80:0000:0000:0000:4ebb:47ff:fe00:1122"
FABRIC_IP = "10.10.1.11"
FABRIC_GID = "0000:0000:0000:0000:0000:ffff:0a0a:010b"
GLOBAL_IP6 = "2001:db8:1::11"
GLOBAL_GID6 = "2001:0db8:0001:0000:0000:0000:0000:0011"
# Read-only: it is the default of the node fixture's builder.
NETDEV_STATS = MappingProxyType({"rx_crc_errors": 0, "rx_dropped": 4, "tx_dropped": 0, "rx_errors": 1})


@pytest.fixture
def node(tmp_path):
    """Build a stand-in tree; returns a function taking the stand-in's options."""

    def build(
        addresses=(FABRIC_IP + "/24", GLOBAL_IP6 + "/64"),
        extra_addresses=(),
        mtu=9000,
        table_size=32,
        stats=NETDEV_STATS,
        netdev=NETDEV,
        **options,
    ):
        net_dir = tmp_path / "net"
        dev_dir = net_dir / netdev
        (dev_dir / "statistics").mkdir(parents=True, exist_ok=True)
        if mtu is not None:
            (dev_dir / "mtu").write_text("%d\n" % mtu)
        for name, value in (stats or {}).items():
            (dev_dir / "statistics" / name).write_text("%d\n" % value)
        root = tmp_path / "sys"
        cx7.sync_tree(
            root,
            options.pop("hca", HCA),
            options.pop("port", 1),
            netdev,
            options.pop("mac", MAC),
            list(addresses),
            extra_addresses=list(extra_addresses),
            table_size=table_size,
            net_dir=net_dir,
            **options,
        )
        return root

    return build


def port_dir(root, hca=HCA, port=1):
    return root / "class" / "infiniband" / hca / "ports" / str(port)


def entry(index, roce_version, scope, netdev=NETDEV, address=None):
    """A table entry of the shape read_gid_table() returns, for pure selection tests."""
    address = (
        address
        or {
            "ipv4": "10.0.0.%d" % index,
            "global": "2001:db8::%x" % index,
            "link-local": "fe80::%x" % index,
        }[scope]
    )
    return {
        "index": index,
        "gid": "gid-%d" % index,
        "type": "RoCE v2" if roce_version == 2 else "IB/RoCE v1",
        "roce_version": roce_version,
        "netdev": netdev,
        "address": address,
        "scope": scope,
    }


# --- read_gid_table -------------------------------------------------------


def test_table_lists_populated_slots_in_kernel_order(node):
    table = read_gid_table(node(), HCA, 1)

    assert [(e["index"], e["gid"], e["type"], e["roce_version"], e["netdev"]) for e in table] == [
        (0, DEFAULT_GID, "IB/RoCE v1", 1, NETDEV),
        (1, DEFAULT_GID, "RoCE v2", 2, NETDEV),
        (2, FABRIC_GID, "IB/RoCE v1", 1, NETDEV),
        (3, FABRIC_GID, "RoCE v2", 2, NETDEV),
        (4, GLOBAL_GID6, "IB/RoCE v1", 1, NETDEV),
        (5, GLOBAL_GID6, "RoCE v2", 2, NETDEV),
    ]
    assert [(e["address"], e["scope"]) for e in table[::2]] == [
        ("fe80::4ebb:47ff:fe00:1122", "link-local"),
        (FABRIC_IP, "ipv4"),
        (GLOBAL_IP6, "global"),
    ]


def test_empty_slots_attributes_are_never_opened(node, monkeypatch):
    root = node(table_size=64)
    opened = []
    real_open = open

    def spying_open(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(_roce_gid, "open", spying_open, raising=False)
    table = read_gid_table(root, HCA, 1)

    attr_reads = sorted(
        int(os.path.basename(p)) for p in opened if os.sep + "gid_attrs" + os.sep in p
    )
    assert attr_reads == sorted([e["index"] for e in table] * 2)
    assert len([p for p in opened if os.sep + "gids" + os.sep in p]) == 64


def test_empty_slot_attributes_fail_like_the_kernel(node):
    root = node()
    with pytest.raises(OSError):
        (port_dir(root) / "gid_attrs" / "types" / "10").read_text()


def test_slot_emptied_between_reads_is_skipped(node, monkeypatch):
    root = node()
    gid_file = port_dir(root) / "gids" / "4"
    real_open = open

    def racing_open(path, *args, **kwargs):
        if os.fspath(path).endswith(os.path.join("types", "4")):
            gid_file.chmod(0o644)
            gid_file.write_text(cx7.ZERO_GID + "\n")
            raise OSError(errno.EINVAL, "Invalid argument", os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(_roce_gid, "open", racing_open, raising=False)
    assert [e["index"] for e in read_gid_table(root, HCA, 1)] == [0, 1, 2, 3, 5]


def test_populated_slot_with_unreadable_attributes_is_an_error(node):
    root = node()
    types_file = port_dir(root) / "gid_attrs" / "types" / "3"
    types_file.unlink()
    types_file.mkdir()

    with pytest.raises(RoceGidError, match="slot 3 .* populated but its attributes cannot be read"):
        read_gid_table(root, HCA, 1)


def test_malformed_gid_is_an_error(node):
    root = node()
    gid_file = port_dir(root) / "gids" / "2"
    gid_file.chmod(0o644)
    gid_file.write_text("not-a-gid\n")

    with pytest.raises(RoceGidError, match="slot 2 .*'not-a-gid'"):
        read_gid_table(root, HCA, 1)


def test_missing_hca_lists_the_hcas_present(node):
    root = node()
    with pytest.raises(HcaNotFoundError) as caught:
        read_gid_table(root, "roceP2p1s0f1", 1)
    assert caught.value.available == [HCA]
    assert "roceP2p1s0f1 not found" in str(caught.value)
    assert HCA in str(caught.value)


def test_missing_rdma_class_says_no_devices(tmp_path):
    with pytest.raises(HcaNotFoundError, match="no RDMA devices") as caught:
        read_gid_table(tmp_path, HCA, 1)
    assert caught.value.available == []


def test_missing_port_lists_the_ports_present(node):
    root = node()
    with pytest.raises(PortNotFoundError) as caught:
        read_gid_table(root, HCA, 2)
    assert caught.value.available == ["1"]
    assert "no port 2" in str(caught.value)


# --- select_gid -----------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "roce_version", "expected_index"),
    [
        (FABRIC_IP, 2, 3),
        (FABRIC_IP, 1, 2),
        (FABRIC_IP + "/24", 2, 3),
        ("::ffff:" + FABRIC_IP, 2, 3),
        (GLOBAL_IP6, 2, 5),
        ("2001:0db8:0001::0011", 1, 4),
        ("fe80::4ebb:47ff:fe00:1122", 2, 1),
        ("fe80::4ebb:47ff:fe00:1122%enp1s0f1np1", 2, 1),
    ],
)
def test_select_by_address(node, address, roce_version, expected_index):
    table = read_gid_table(node(), HCA, 1)
    chosen = select_gid(table, address=address, roce_version=roce_version)
    assert chosen["index"] == expected_index
    assert chosen["roce_version"] == roce_version


def test_select_by_address_and_matching_netdev(node):
    table = read_gid_table(node(), HCA, 1)
    assert select_gid(table, address=FABRIC_IP, netdev=NETDEV)["index"] == 3


def test_extra_addresses_push_the_index_up(node):
    table = read_gid_table(node(extra_addresses=["192.168.7.7", "192.168.7.8"]), HCA, 1)
    assert select_gid(table, address=FABRIC_IP)["index"] == 7


def test_absent_address_lists_the_table(node):
    table = read_gid_table(node(), HCA, 1)
    with pytest.raises(GidNotFoundError) as caught:
        select_gid(table, address="10.10.1.99", netdev=NETDEV)
    message = str(caught.value)
    assert "No GID carries address 10.10.1.99" in message
    assert not isinstance(caught.value, AddressOnOtherNetdevError)
    for e in table:
        assert "index %d: gid %s" % (e["index"], e["gid"]) in message
    assert "RoCE v2, netdev %s" % NETDEV in message
    assert caught.value.table == table


def test_address_on_another_netdev_names_it(node):
    table = read_gid_table(node(extra_addresses=["10.10.9.9@enp1s0f0np0"]), HCA, 1)
    with pytest.raises(AddressOnOtherNetdevError) as caught:
        select_gid(table, address="10.10.9.9", netdev=NETDEV)
    assert caught.value.netdevs == ["enp1s0f0np0"]
    assert "bound to netdev enp1s0f0np0, not to the requested netdev %s" % NETDEV in str(
        caught.value
    )
    assert select_gid(table, address="10.10.9.9")["netdev"] == "enp1s0f0np0"


def test_address_on_two_netdevs_is_resolved_per_netdev(node):
    table = read_gid_table(
        node(addresses=["10.10.9.9"], extra_addresses=["10.10.9.9@enp1s0f0np0"]), HCA, 1
    )
    assert [(e["index"], e["netdev"]) for e in table if e["address"] == "10.10.9.9"] == [
        (2, "enp1s0f0np0"),
        (3, "enp1s0f0np0"),
        (4, NETDEV),
        (5, NETDEV),
    ]
    assert select_gid(table, address="10.10.9.9", netdev=NETDEV)["index"] == 5
    assert select_gid(table, address="10.10.9.9")["index"] == 3


def test_address_present_only_as_the_other_version():
    table = [entry(0, 1, "link-local"), entry(2, 1, "ipv4", address=FABRIC_IP)]
    with pytest.raises(GidNotFoundError, match="only as IB/RoCE v1, not as RoCE v2"):
        select_gid(table, address=FABRIC_IP)
    assert select_gid(table, address=FABRIC_IP, roce_version=1)["index"] == 2


@pytest.mark.parametrize(
    ("name", "table", "roce_version", "expected_index"),
    [
        (
            "v2 IPv4 beats everything",
            [
                entry(0, 1, "link-local"),
                entry(1, 2, "link-local"),
                entry(2, 1, "ipv4"),
                entry(3, 2, "global"),
                entry(4, 2, "ipv4"),
            ],
            2,
            4,
        ),
        (
            "v2 global IPv6 beats v2 link-local and v1 IPv4",
            [
                entry(0, 1, "link-local"),
                entry(1, 2, "link-local"),
                entry(2, 1, "ipv4"),
                entry(3, 2, "global"),
            ],
            2,
            3,
        ),
        (
            "v2 link-local beats v1 IPv4",
            [entry(0, 1, "link-local"), entry(1, 2, "link-local"), entry(2, 1, "ipv4")],
            2,
            1,
        ),
        (
            "v1 only: IPv4 first",
            [entry(0, 1, "link-local"), entry(2, 1, "global"), entry(3, 1, "ipv4")],
            2,
            3,
        ),
        (
            "v1 only: global before link-local",
            [entry(0, 1, "link-local"), entry(2, 1, "global")],
            2,
            2,
        ),
        (
            "lowest index among equals",
            [entry(9, 2, "ipv4"), entry(5, 2, "ipv4"), entry(7, 2, "ipv4")],
            2,
            5,
        ),
        (
            "entries on other netdevs are ignored",
            [entry(1, 2, "link-local"), entry(3, 2, "ipv4", netdev="enP2p1s0f1np1")],
            2,
            1,
        ),
        (
            "v1 requested: v1 IPv4 first",
            [entry(1, 2, "ipv4"), entry(2, 1, "link-local"), entry(4, 1, "ipv4")],
            1,
            4,
        ),
        (
            "unknown GID types are never chosen",
            [
                dict(entry(0, 2, "ipv4"), type="RoCE v3", roce_version=None),
                entry(1, 2, "link-local"),
            ],
            2,
            1,
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_select_by_netdev_priority(name, table, roce_version, expected_index):
    assert select_gid(table, netdev=NETDEV, roce_version=roce_version)["index"] == expected_index


def test_select_by_netdev_on_a_real_shaped_tree(node):
    assert select_gid(read_gid_table(node(), HCA, 1), netdev=NETDEV)["index"] == 3
    assert select_gid(read_gid_table(node(addresses=()), HCA, 1), netdev=NETDEV)["index"] == 1


def test_unknown_netdev_lists_the_netdevs_present(node):
    table = read_gid_table(node(), HCA, 1)
    with pytest.raises(
        GidNotFoundError, match="No GID is bound to netdev eth9 .*netdevs in the table: %s" % NETDEV
    ):
        select_gid(table, netdev="eth9")


def test_empty_table_message():
    with pytest.raises(GidNotFoundError, match="holds no populated entry"):
        select_gid([], address=FABRIC_IP)


def test_selected_entry_is_a_copy(node):
    table = read_gid_table(node(), HCA, 1)
    select_gid(table, address=FABRIC_IP)["index"] = 99
    assert [e["index"] for e in table] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, ValueError),
        ({"address": FABRIC_IP, "roce_version": 3}, ValueError),
        ({"address": "10.10.1.300"}, RoceGidError),
    ],
)
def test_invalid_selection_arguments(kwargs, error):
    with pytest.raises(error):
        select_gid([entry(3, 2, "ipv4")], **kwargs)


# --- read_port_info -------------------------------------------------------


def test_port_info_of_an_active_port(node):
    assert read_port_info(node(), HCA, 1) == {
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "link_layer": "Ethernet",
        "rate": "200 Gb/sec (4X HDR)",
        "rate_gbps": 200.0,
        "netdev": NETDEV,
        "netdev_mtu": 9000,
        "active_mtu": 4096,
    }


def test_port_info_of_a_down_port_with_another_rate(node):
    info = read_port_info(node(down=True, rate="100 Gb/sec (2X HDR)"), HCA, 1)
    assert (info["state"], info["phys_state"]) == ("DOWN", "Disabled")
    assert (info["rate"], info["rate_gbps"]) == ("100 Gb/sec (2X HDR)", 100.0)


@pytest.mark.parametrize(("mtu", "active_mtu"), [(9000, 4096), (4200, 4096), (1500, 1024)])
def test_port_info_active_mtu(node, mtu, active_mtu):
    info = read_port_info(node(mtu=mtu), HCA, 1)
    assert (info["netdev_mtu"], info["active_mtu"]) == (mtu, active_mtu)


def test_port_info_netdev_found_from_the_pci_device_when_slot_0_is_empty(node):
    root = node()
    slot0 = port_dir(root) / "gids" / "0"
    slot0.chmod(0o644)
    slot0.write_text(cx7.ZERO_GID + "\n")
    assert read_port_info(root, HCA, 1)["netdev"] == NETDEV


def test_port_info_without_a_netdev_mtu(node):
    info = read_port_info(node(mtu=None), HCA, 1)
    assert (info["netdev"], info["netdev_mtu"], info["active_mtu"]) == (NETDEV, None, None)


@pytest.mark.parametrize(
    ("netdev_mtu", "path_mtu"),
    [
        (9000, 4096),
        (4200, 4096),
        (4192, 4096),
        (4191, 2048),
        (2144, 2048),
        (2143, 1024),
        (1500, 1024),
        (1120, 1024),
        (1119, 512),
        (352, 256),
        (351, None),
        (None, None),
    ],
)
def test_roce_path_mtu_boundaries(netdev_mtu, path_mtu):
    assert roce_path_mtu(netdev_mtu) == path_mtu


# --- read_port_counters ---------------------------------------------------


def test_counters_of_port_and_netdev(node):
    assert read_port_counters(node(), HCA, 1, netdev=NETDEV) == {
        "symbol_error": 0,
        "link_downed": 0,
        "port_rcv_errors": 0,
        "port_xmit_discards": 0,
        "port_rcv_remote_physical_errors": 0,
        "rx_crc_errors": 0,
        "rx_dropped": 4,
        "tx_dropped": 0,
        "rx_errors": 1,
    }


def test_counters_follow_a_bump_and_leave_out_what_is_missing(node):
    root = node(stats={"rx_crc_errors": 7}, bump_counters=["symbol_error=3", "link_downed"])
    counters = read_port_counters(root, HCA, 1, netdev=NETDEV)
    assert (counters["symbol_error"], counters["link_downed"], counters["rx_crc_errors"]) == (
        3,
        1,
        7,
    )
    assert "rx_dropped" not in counters
    assert "rx_crc_errors" not in read_port_counters(root, HCA, 1)


# --- command line ---------------------------------------------------------


def test_cli_prints_the_index(node, capsys):
    root = node()
    assert main(["--sysfs-root", str(root), "--hca", HCA, "--address", FABRIC_IP]) == 0
    assert capsys.readouterr().out == "3\n"


def test_cli_json_format(node, capsys):
    root = node()
    argv = ["--sysfs-root", str(root), "--hca", HCA, "--netdev", NETDEV, "--roce-version", "1"]
    assert main(argv + ["--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["index"], printed["type"], printed["address"]) == (2, "IB/RoCE v1", FABRIC_IP)


def test_cli_writes_the_env_file_atomically(node, tmp_path, capsys):
    root = node()
    env_dir = tmp_path / "run"
    env_dir.mkdir()
    env_file = env_dir / "nccl-gid.env"
    env_file.write_text("NCCL_IB_GID_INDEX=11\n")
    env_file.chmod(0o600)

    argv = ["--sysfs-root", str(root), "--hca", HCA, "--address", FABRIC_IP, "--write-env", str(env_file)]
    assert main(argv) == 0

    assert env_file.read_text() == "NCCL_IB_GID_INDEX=3\n"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o644
    assert sorted(os.listdir(env_dir)) == ["nccl-gid.env"]


def test_cli_leaves_the_env_file_alone_on_failure(node, tmp_path, capsys):
    root = node()
    env_file = tmp_path / "nccl-gid.env"
    env_file.write_text("NCCL_IB_GID_INDEX=3\n")
    argv = ["--sysfs-root", str(root), "--hca", HCA, "--address", "10.10.1.99", "--write-env", str(env_file)]

    assert main(argv) == 2

    assert env_file.read_text() == "NCCL_IB_GID_INDEX=3\n"
    err = capsys.readouterr().err
    assert err.startswith(
        "roce_gid: looked for a RoCE v2 GID on %s port 1 for address 10.10.1.99:" % HCA
    )
    assert "index 3: gid %s (%s), RoCE v2" % (FABRIC_GID, FABRIC_IP) in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "in_message"),
    [
        (["--hca", "mlx5_9", "--address", FABRIC_IP], "HCA mlx5_9 not found"),
        (["--hca", HCA, "--port", "2", "--address", FABRIC_IP], "no port 2"),
        (
            ["--hca", HCA, "--address", FABRIC_IP, "--netdev", "eth9"],
            "not to the requested netdev eth9",
        ),
        (
            ["--hca", HCA, "--address", FABRIC_IP, "--write-env", "/nonexistent/dir/env"],
            "cannot write",
        ),
    ],
)
def test_cli_failures_exit_2(node, capsys, argv, in_message):
    root = node()
    assert main(["--sysfs-root", str(root)] + argv) == 2
    captured = capsys.readouterr()
    assert in_message in captured.err
    assert captured.out == ""


def test_cli_needs_an_address_or_a_netdev(node, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--sysfs-root", str(node()), "--hca", HCA])
    assert caught.value.code == 2
    assert "--address, --netdev or both" in capsys.readouterr().err


def _run_script(*args):
    """The resolver as the engine unit runs it: a bare interpreter, no Ansible."""
    command = [sys.executable, "-I", "-S", str(ROCE_GID_SCRIPT), *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_script_runs_without_ansible_or_site_packages(node, tmp_path):
    root = node()
    env_file = tmp_path / "gid.env"
    run = _run_script("--sysfs-root", str(root), "--hca", HCA, "--address", FABRIC_IP, "--write-env", str(env_file))
    assert (run.returncode, run.stdout, run.stderr) == (0, "3\n", "")
    assert env_file.read_text() == "NCCL_IB_GID_INDEX=3\n"

    failing = _run_script("--sysfs-root", str(root), "--hca", HCA, "--address", "10.10.1.99")
    assert failing.returncode == 2
    assert "No GID carries address 10.10.1.99" in failing.stderr


# --- the stand-in itself --------------------------------------------------


def test_standin_default_gid_is_the_eui64_of_the_mac():
    assert str(cx7.default_gid("4c:bb:47:00:11:22")) == "fe80::4ebb:47ff:fe00:1122"
    assert str(cx7.default_gid("02:00:00:00:00:01")) == "fe80::ff:fe00:1"


def test_standin_writes_every_slot_up_to_the_table_size(node):
    pdir = port_dir(node(table_size=40))
    assert sorted(int(n) for n in os.listdir(pdir / "gids")) == list(range(40))
    empty = [
        n
        for n in os.listdir(pdir / "gids")
        if (pdir / "gids" / n).read_text().strip() == cx7.ZERO_GID
    ]
    assert len(empty) == 34
    for name in empty:
        assert (pdir / "gid_attrs" / "types" / name).is_dir()
        assert (pdir / "gid_attrs" / "ndevs" / name).is_dir()


def test_standin_points_class_net_at_the_net_dir(node, tmp_path):
    root = node()
    assert os.readlink(root / "class" / "net") == str(tmp_path / "net")


def test_standin_address_change_moves_only_the_changed_address(node):
    node(addresses=["10.10.1.11", "10.10.1.12"])
    root = node(addresses=["10.10.1.12", "10.10.1.13"])
    table = read_gid_table(root, HCA, 1)
    assert select_gid(table, address="10.10.1.12")["index"] == 5
    assert select_gid(table, address="10.10.1.13")["index"] == 3
    with pytest.raises(GidNotFoundError):
        select_gid(table, address="10.10.1.11")


def test_standin_rerun_with_same_addresses_rewrites_nothing(node):
    root = node()
    gids = port_dir(root) / "gids"
    before = {n: (gids / n).stat().st_ino for n in os.listdir(gids)}
    node()
    assert {n: (gids / n).stat().st_ino for n in os.listdir(gids)} == before


def test_standin_refuses_unknown_counters(node):
    with pytest.raises(cx7.StandinError, match="unknown counter 'crc'"):
        node(bump_counters=["crc"])


def test_standin_table_full(node):
    with pytest.raises(cx7.StandinError, match="full"):
        node(table_size=4)


def test_standin_watch_follows_address_changes(node, tmp_path):
    root = node(addresses=[FABRIC_IP])
    args = cx7._argument_parser().parse_args(
        [
            "--root",
            str(root),
            "--hca",
            HCA,
            "--netdev",
            NETDEV,
            "--net-dir",
            str(tmp_path / "net"),
            "--table-size",
            "32",
        ]
    )
    states = iter(
        [
            cx7.StandinError("netdev %s not found" % NETDEV),
            (MAC, [FABRIC_IP]),
            (MAC, [FABRIC_IP]),
            (MAC, ["10.10.1.12", FABRIC_IP]),
        ]
    )

    def observe():
        state = next(states)
        if isinstance(state, Exception):
            raise state
        return state

    logged = []
    cx7.watch(args, observe, 0.5, iterations=4, sleep=lambda _s: None, log=logged.append)

    assert len(logged) == 3
    assert logged[0].startswith("cx7_sysfs: waiting: netdev")
    table = read_gid_table(root, HCA, 1)
    assert select_gid(table, address=FABRIC_IP)["index"] == 3
    assert select_gid(table, address="10.10.1.12")["index"] == 5


def test_standin_reads_addresses_from_ip_json(monkeypatch):
    ip_output = json.dumps(
        [
            {
                "ifname": NETDEV,
                "address": MAC,
                "addr_info": [
                    {"family": "inet", "local": FABRIC_IP, "prefixlen": 24},
                    {"family": "inet6", "local": GLOBAL_IP6, "prefixlen": 64},
                    {"family": "inet6", "local": "fe80::4ebb:47ff:fe00:1122", "prefixlen": 64},
                ],
            }
        ]
    )
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout=ip_output, stderr="")

    monkeypatch.setattr(cx7.subprocess, "run", fake_run)
    mac, addresses = cx7.ip_addr_show(NETDEV)

    assert calls == [["ip", "-j", "addr", "show", "dev", NETDEV]]
    assert mac == MAC
    assert [str(ip) for ip in cx7.gid_addresses(addresses)] == [FABRIC_IP, GLOBAL_IP6]


def test_standin_cli_fails_when_the_netdev_is_missing(tmp_path, monkeypatch, capsys):
    def missing(netdev):
        raise cx7.StandinError("netdev %s not found" % netdev)

    monkeypatch.setattr(cx7, "ip_addr_show", missing)
    assert cx7.main(["--root", str(tmp_path / "sys"), "--hca", HCA, "--netdev", NETDEV]) == 2
    assert "netdev %s not found" % NETDEV in capsys.readouterr().err
    assert not (tmp_path / "sys").exists()


def test_standin_cli_builds_from_options(tmp_path):
    root = tmp_path / "sys"
    argv = [
        "--root",
        str(root),
        "--hca",
        HCA,
        "--netdev",
        NETDEV,
        "--mac",
        MAC,
        "--address",
        FABRIC_IP,
        "--extra-address",
        "192.168.7.7",
        "--net-dir",
        str(tmp_path),
        "--table-size",
        "16",
    ]
    assert cx7.main(argv) == 0
    assert select_gid(read_gid_table(root, HCA, 1), address=FABRIC_IP)["index"] == 5
