# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roce_gid module against trees written by the ConnectX-7 sysfs stand-in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from unit_support import load_cx7_standin, module_result

from ansible_collections.dgxspark.cluster.plugins.modules import roce_gid

HCA = "roceP2p1s0f1"
NETDEV = "enP2p1s0f1np1"
MAC = "4c:bb:47:00:11:23"
FABRIC_IP = "10.10.2.11"


cx7 = load_cx7_standin()


@pytest.fixture
def sysfs_root(tmp_path):
    net_dir = tmp_path / "net"
    (net_dir / NETDEV / "statistics").mkdir(parents=True)
    (net_dir / NETDEV / "mtu").write_text("9000\n")
    (net_dir / NETDEV / "statistics" / "rx_crc_errors").write_text("2\n")
    root = tmp_path / "sys"
    cx7.sync_tree(
        root,
        HCA,
        1,
        NETDEV,
        MAC,
        [FABRIC_IP],
        extra_addresses=["192.168.7.7"],
        table_size=16,
        net_dir=net_dir,
        bump_counters=["port_rcv_errors=5"],
    )
    return root


def run_module(capsys, **args):
    result, exit_code = module_result(roce_gid.main, capsys, args)
    return dict(result, exit_code=exit_code)


def snapshot(root):
    """Every path under root with its content or link target, to prove nothing was written."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                state[path] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                stat = os.stat(path)
                state[path] = ("file", stat.st_mtime_ns, Path(path).read_text())
            else:
                state[path] = ("dir",)
    return state


def test_resolves_the_fabric_address(sysfs_root, capsys):
    result = run_module(
        capsys, hca=HCA, address=FABRIC_IP, netdev=NETDEV, sysfs_root=str(sysfs_root)
    )

    assert result["exit_code"] == 0
    assert result["changed"] is False
    assert {
        k: result[k] for k in ("index", "gid", "type", "roce_version", "netdev", "address", "scope")
    } == {
        "index": 5,
        "gid": "0000:0000:0000:0000:0000:ffff:0a0a:020b",
        "type": "RoCE v2",
        "roce_version": 2,
        "netdev": NETDEV,
        "address": FABRIC_IP,
        "scope": "ipv4",
    }
    assert [e["index"] for e in result["table"]] == [0, 1, 2, 3, 4, 5]
    assert result["port"]["state"] == "ACTIVE"
    assert (result["port"]["netdev_mtu"], result["port"]["active_mtu"]) == (9000, 4096)
    assert result["counters"]["port_rcv_errors"] == 5
    assert result["counters"]["rx_crc_errors"] == 2
    assert "rx_dropped" not in result["counters"]


def test_roce_v1_and_netdev_only(sysfs_root, capsys):
    result = run_module(capsys, hca=HCA, netdev=NETDEV, roce_version=1, sysfs_root=str(sysfs_root))
    assert result["exit_code"] == 0
    assert (result["index"], result["type"], result["address"]) == (2, "IB/RoCE v1", "192.168.7.7")


def test_absent_address_fails_with_the_table(sysfs_root, capsys):
    result = run_module(capsys, hca=HCA, address="10.10.2.99", sysfs_root=str(sysfs_root))

    assert result["exit_code"] == 1
    assert result["failed"] is True
    assert "No GID carries address 10.10.2.99" in result["msg"]
    assert (
        "index 5: gid 0000:0000:0000:0000:0000:ffff:0a0a:020b (10.10.2.11), RoCE v2"
        in result["msg"]
    )
    assert [(e["index"], e["address"]) for e in result["table"]][-2:] == [
        (4, FABRIC_IP),
        (5, FABRIC_IP),
    ]
    assert "index" not in result


def test_address_on_another_netdev_fails_naming_it(sysfs_root, capsys):
    result = run_module(
        capsys, hca=HCA, address=FABRIC_IP, netdev="enp1s0f1np1", sysfs_root=str(sysfs_root)
    )
    assert result["exit_code"] == 1
    assert "bound to netdev %s, not to the requested netdev enp1s0f1np1" % NETDEV in result["msg"]
    assert len(result["table"]) == 6


@pytest.mark.parametrize(
    ("args", "in_message", "available"),
    [
        ({"hca": "rocep1s0f1"}, "HCA rocep1s0f1 not found", [HCA]),
        ({"hca": HCA, "port": 2}, "no port 2", ["1"]),
    ],
)
def test_missing_hca_or_port_lists_what_exists(sysfs_root, capsys, args, in_message, available):
    result = run_module(capsys, address=FABRIC_IP, sysfs_root=str(sysfs_root), **args)
    assert result["exit_code"] == 1
    assert in_message in result["msg"]
    assert result["available"] == available
    assert result["table"] == []


def test_check_mode_returns_the_same_and_writes_nothing(sysfs_root, capsys):
    before = snapshot(sysfs_root)
    normal = run_module(capsys, hca=HCA, address=FABRIC_IP, sysfs_root=str(sysfs_root))
    checked = run_module(
        capsys, hca=HCA, address=FABRIC_IP, sysfs_root=str(sysfs_root), _ansible_check_mode=True
    )

    assert checked["exit_code"] == 0
    assert checked["changed"] is False
    for key in ("index", "gid", "table", "port", "counters"):
        assert checked[key] == normal[key]
    assert snapshot(sysfs_root) == before


@pytest.mark.parametrize(
    ("args", "in_message"),
    [
        ({"hca": HCA}, "one of the following is required: address, netdev"),
        ({"hca": HCA, "address": FABRIC_IP, "roce_version": 3}, "roce_version"),
        ({"address": FABRIC_IP}, "missing required arguments: hca"),
    ],
)
def test_argument_errors(sysfs_root, capsys, args, in_message):
    result = run_module(capsys, sysfs_root=str(sysfs_root), **args)
    assert result["exit_code"] == 1
    assert in_message in result["msg"]


def test_documentation_matches_the_argument_spec(monkeypatch):
    documented = yaml.safe_load(roce_gid.DOCUMENTATION)["options"]
    captured = {}

    class Recorder:
        def __init__(self, **kwargs):
            captured.update(kwargs)
            raise RuntimeError("argument spec captured")

    monkeypatch.setattr(roce_gid, "AnsibleModule", Recorder)
    with pytest.raises(RuntimeError, match="captured"):
        roce_gid.main()

    spec = captured["argument_spec"]
    assert sorted(documented) == sorted(spec)
    for name, option in spec.items():
        doc = documented[name]
        assert doc["type"] == option["type"], name
        assert doc.get("default") == option.get("default"), name
        assert doc.get("choices") == option.get("choices"), name
        assert bool(doc.get("required")) == bool(option.get("required")), name
    assert captured["supports_check_mode"] is True
    assert captured["required_one_of"] == [("address", "netdev")]


def test_examples_and_return_are_valid_yaml():
    examples = yaml.safe_load(roce_gid.EXAMPLES)
    assert all(task["name"][0].isupper() for task in examples)
    returned = yaml.safe_load(roce_gid.RETURN)
    assert {
        "index",
        "gid",
        "type",
        "roce_version",
        "netdev",
        "address",
        "table",
        "port",
        "counters",
    } <= set(returned)
