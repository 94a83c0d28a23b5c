# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fabric_link_check module: arguments in, one read of every link, pings, GIDs out."""

from __future__ import annotations

import json

import pytest

from unit_support import FIXTURES, load_cx7_standin, module_result

from ansible_collections.dgxspark.cluster.plugins.module_utils import _fabric_links
from ansible_collections.dgxspark.cluster.plugins.modules import fabric_link_check

NETDEV = "enP2p1s0f1np1"
HCA = "roceP2p1s0f1"
LINKS = [{"netdev": NETDEV, "hca": HCA, "address": "192.168.100.11", "prefix": 24}]
SHOW = json.dumps([{"ifname": NETDEV, "flags": ["UP", "LOWER_UP"], "mtu": 9000, "operstate": "UP",
                    "addr_info": [{"family": "inet", "local": "192.168.100.11"}]}])


@pytest.fixture
def commands(monkeypatch):
    calls = []

    def run(argv, timeout=None):
        calls.append(argv)
        if argv[0] == "/fake/bin/ip":
            return 0, SHOW, ""
        if argv[-1] == "192.168.100.14":
            return 1, (FIXTURES / "fabric" / "ping_no_reply.txt").read_text(), ""
        return 0, (FIXTURES / "fabric" / "ping_jumbo_ok.txt").read_text(), ""

    monkeypatch.setattr(_fabric_links, "_run", run)
    monkeypatch.setattr(fabric_link_check.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: "/fake/bin/" + name)
    return calls


def run_module(capsys, **args):
    result, exit_code = module_result(fabric_link_check.main, capsys, args)
    return dict(result, exit_code=exit_code)


def test_reads_the_links_and_pings_every_peer(capsys, commands):
    pings = [{"peer": "spark2", "netdev": NETDEV, "address": "192.168.100.12", "position": 0},
             {"peer": "spark4", "netdev": NETDEV, "address": "192.168.100.14", "position": 0}]
    result = run_module(capsys, links=LINKS, mtu=9000, pings=pings, ping_count=2)
    assert result["exit_code"] == 0 and result["changed"] is False and not result.get("failed")
    assert result["links"][0]["configured"] is True and result["links"][0]["operstate"] == "UP"
    assert [p["rc"] for p in result["pings"]] == [0, 1]
    ping = next(argv for argv in commands if argv[0] == "/fake/bin/ping")
    assert ping[:3] == ["/fake/bin/ping", "-c", "2"] and ping[ping.index("-s") + 1] == "8972"


def test_runs_unchanged_in_check_mode(capsys, commands):
    result = run_module(capsys, links=LINKS, mtu=9000, _ansible_check_mode=True)
    assert result["exit_code"] == 0 and result["links"][0]["configured"] is True and result["pings"] == []


def test_gid_needs_every_hca(capsys, commands):
    result = run_module(capsys, links=[{"netdev": NETDEV, "address": "192.168.100.11"}], mtu=9000, gid=True)
    assert result["failed"] is True
    assert result["msg"] == "gid needs the hca of every link; none given for enP2p1s0f1np1"


def test_resolves_the_gid_from_sysfs(capsys, commands, tmp_path):
    net_dir = tmp_path / "net"
    (net_dir / NETDEV).mkdir(parents=True)
    (net_dir / NETDEV / "mtu").write_text("9000\n")
    load_cx7_standin().sync_tree(tmp_path / "sys", HCA, 1, NETDEV, "4c:bb:47:00:11:23", ["192.168.100.11"],
                                 table_size=8, net_dir=net_dir)
    result = run_module(capsys, links=LINKS, mtu=9000, gid=True, sysfs_root=str(tmp_path / "sys"))
    assert result["links"][0]["gid"]["index"] == 3
    assert result["links"][0]["gid"]["port"]["state"] == "ACTIVE"


def test_refuses_links_without_an_address(capsys, commands):
    result = run_module(capsys, links=[{"netdev": NETDEV}], mtu=9000)
    assert result["failed"] is True and "address" in result["msg"]
