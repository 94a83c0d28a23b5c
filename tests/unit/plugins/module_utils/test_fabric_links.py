# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one-call fabric link check: reading, waiting and pinging on the node,
judging on the controller."""

from __future__ import annotations

import json
import threading

import pytest

from unit_support import FIXTURES, load_cx7_standin

from ansible_collections.dgxspark.cluster.plugins.module_utils._fabric_links import (
    COLD_BOOT_REMEDY,
    FabricLinkError,
    check_links,
    link_state,
    parse_ip_addr,
    ping_argv,
    ping_plan,
    verdict,
)

NETDEV = "enP2p1s0f1np1"
HCA = "roceP2p1s0f1"
LINK = {"netdev": NETDEV, "hca": HCA, "address": "192.168.100.11", "prefix": 24}
LINK2 = {"netdev": "enp1s0f1np1", "hca": "rocep1s0f1", "address": "192.168.101.11", "prefix": 24}
PING_FIXTURES = FIXTURES / "fabric"


def ip_json(netdev=NETDEV, carrier=True, mtu=9000, addresses=("192.168.100.11",), operstate=None):
    flags = ["BROADCAST", "MULTICAST", "UP"] + (["LOWER_UP"] if carrier else ["NO-CARRIER"])
    addr_info = [{"family": "inet", "local": a, "prefixlen": 24} for a in addresses]
    addr_info.append({"family": "inet6", "local": "fe80::1", "prefixlen": 64})
    return json.dumps([{
        "ifindex": 4, "ifname": netdev, "flags": flags, "mtu": mtu,
        "operstate": operstate or ("UP" if carrier else "DOWN"), "addr_info": addr_info,
    }])


class FakeNode:
    """Answers ip and ping like a node whose links change over (fake) time."""

    def __init__(self, shows, pings=None):
        # shows: netdev -> list of (rc, stdout, stderr), one per read; the last repeats.
        self.shows = {netdev: list(answers) for netdev, answers in shows.items()}
        self.pings = pings or {}
        self.now = 0.0
        self.calls = []
        self.lock = threading.Lock()

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def run(self, argv, timeout=None):
        with self.lock:
            self.calls.append(list(argv))
        if argv[0] == "ip":
            answers = self.shows.get(argv[-1]) or [(1, "", 'Device "%s" does not exist.' % argv[-1])]
            return answers.pop(0) if len(answers) > 1 else answers[0]
        return self.pings.get(argv[-1], (0, (PING_FIXTURES / "ping_jumbo_ok.txt").read_text(), ""))

    def ping_calls(self):
        return [call for call in self.calls if call[0] == "ping"]

    def ip_calls(self):
        return [call for call in self.calls if call[0] == "ip"]


def check(node, links=(LINK,), **kwargs):
    return check_links(list(links), 9000, run=node.run, clock=node.clock, sleep=node.sleep, **kwargs)


# --- parsing ------------------------------------------------------------------


def test_parse_ip_addr_reads_carrier_operstate_mtu_and_ipv4():
    assert parse_ip_addr(ip_json()) == {
        "present": True, "carrier": True, "operstate": "UP", "mtu": 9000, "addresses": ["192.168.100.11"],
    }
    down = parse_ip_addr(ip_json(carrier=False, addresses=()))
    assert (down["carrier"], down["operstate"], down["addresses"]) == (False, "DOWN", [])


@pytest.mark.parametrize("stdout", ["", "not json", "[]", "{}", "[1]"])
def test_parse_ip_addr_treats_anything_else_as_absent(stdout):
    assert parse_ip_addr(stdout)["present"] is False


def test_link_state_is_configured_only_with_its_address_and_mtu():
    assert link_state(LINK, 0, ip_json(), "", 9000)["configured"] is True
    assert link_state(LINK, 0, ip_json(mtu=1500), "", 9000)["configured"] is False
    assert link_state(LINK, 0, ip_json(addresses=("192.168.100.99",)), "", "9000")["configured"] is False
    state = link_state(LINK, 0, ip_json(), "", 9000)
    assert {k: state[k] for k in ("ifname", "hca", "address", "error")} == {
        "ifname": NETDEV, "hca": HCA, "address": "192.168.100.11", "error": None,
    }


def test_link_state_keeps_what_ip_said_when_it_failed():
    state = link_state(LINK, 1, "", 'Device "enP2p1s0f1np1" does not exist.\n', 9000)
    assert state["present"] is False and state["configured"] is False
    assert state["error"] == 'Device "enP2p1s0f1np1" does not exist.'


def test_ping_argv_sends_a_dont_fragment_frame_that_fills_the_mtu():
    assert ping_argv(NETDEV, "192.168.100.12", 9000, 3, 0.2, 2) == [
        "ping", "-c", "3", "-i", "0.2", "-W", "2", "-M", "do", "-s", "8972", "-I", NETDEV, "192.168.100.12",
    ]


# --- the node side ------------------------------------------------------------


PINGS = [
    {"peer": "spark2", "position": 0, "netdev": NETDEV, "address": "192.168.100.12"},
    {"peer": "spark3", "position": 0, "netdev": NETDEV, "address": "192.168.100.13"},
    {"peer": "spark4", "position": 0, "netdev": NETDEV, "address": "192.168.100.14"},
]


def test_a_converged_node_is_read_once_and_every_peer_pinged():
    node = FakeNode({NETDEV: [(0, ip_json(), "")]})
    result = check(node, pings=PINGS, timeout=30)
    assert len(node.ip_calls()) == 1 and result["waited"] == 0
    assert [p["peer"] for p in result["pings"]] == ["spark2", "spark3", "spark4"]
    assert all(p["rc"] == 0 and p["skipped"] is False and p["position"] == 0 for p in result["pings"])
    assert sorted(call[-1] for call in node.ping_calls()) == ["192.168.100.12", "192.168.100.13", "192.168.100.14"]
    assert all(call[call.index("-s") + 1] == "8972" and call[call.index("-M") + 1] == "do" for call in node.ping_calls())
    assert result["links"][0]["configured"] is True and "gid" not in result["links"][0]


def test_pings_are_sent_at_once():
    node = FakeNode({NETDEV: [(0, ip_json(), "")]})
    barrier = threading.Barrier(len(PINGS), timeout=5)
    answer = node.run

    def run(argv, timeout=None):
        if argv[0] == "ping":
            barrier.wait()  # breaks (and fails the test) unless every ping is in flight together
        return answer(argv, timeout)

    result = check_links([LINK], 9000, pings=PINGS, run=run, clock=node.clock, sleep=node.sleep)
    assert all(p["rc"] == 0 for p in result["pings"])


def test_the_node_waits_for_the_address_and_mtu_after_a_change():
    node = FakeNode({NETDEV: [(0, ip_json(mtu=1500, addresses=()), ""), (0, ip_json(mtu=9000, addresses=()), ""),
                              (0, ip_json(), "")]})
    result = check(node, timeout=30)
    assert len(node.ip_calls()) == 3 and result["waited"] == 1.0
    assert result["links"][0]["configured"] is True


def test_the_wait_ends_at_the_timeout_with_what_was_found():
    node = FakeNode({NETDEV: [(0, ip_json(mtu=1500, addresses=()), "")]})
    result = check(node, pings=PINGS, timeout=5)
    assert result["waited"] == 5.0
    assert result["links"][0]["mtu"] == 1500 and result["links"][0]["configured"] is False
    # The link has carrier, so the pings still go out and say what the path does.
    assert len(result["pings"]) == 3 and not any(p["skipped"] for p in result["pings"])


def test_timeout_zero_reads_once():
    node = FakeNode({NETDEV: [(0, ip_json(addresses=()), "")]})
    assert check(node, timeout=0)["waited"] == 0 and len(node.ip_calls()) == 1


def test_a_link_without_carrier_is_waited_for_only_when_asked():
    down = FakeNode({NETDEV: [(0, ip_json(carrier=False, addresses=()), "")]})
    assert check(down, timeout=30, wait_for_carrier=False)["waited"] == 0
    down = FakeNode({NETDEV: [(0, ip_json(carrier=False, addresses=()), "")]})
    assert check(down, timeout=30, wait_for_carrier=True)["waited"] == 30.0
    coming_up = FakeNode({NETDEV: [(0, ip_json(carrier=False, addresses=()), ""), (0, ip_json(), "")]})
    assert check(coming_up, timeout=30, wait_for_carrier=True)["waited"] == 0.5


def test_pings_over_a_link_without_carrier_are_skipped():
    node = FakeNode({NETDEV: [(0, ip_json(), "")], LINK2["netdev"]: [(0, ip_json(LINK2["netdev"], carrier=False), "")]})
    pings = PINGS[:1] + [{"peer": "spark2", "position": 1, "netdev": LINK2["netdev"], "address": "192.168.101.12"}]
    result = check(node, links=(LINK, LINK2), pings=pings)
    assert result["pings"][0]["rc"] == 0
    assert result["pings"][1] == {"peer": "spark2", "position": 1, "netdev": LINK2["netdev"], "address": "192.168.101.12",
                                  "skipped": True, "skip_reason": "enp1s0f1np1 has no carrier"}
    assert len(node.ping_calls()) == 1


def test_a_missing_netdev_is_reported_not_waited_for():
    node = FakeNode({})
    result = check(node, timeout=30)
    assert result["waited"] == 0
    assert result["links"][0]["present"] is False
    assert result["links"][0]["error"] == 'Device "enP2p1s0f1np1" does not exist.'


def test_no_links_is_refused():
    with pytest.raises(FabricLinkError):
        check_links([], 9000)


# --- GIDs read in the same call ------------------------------------------------

cx7 = load_cx7_standin()


@pytest.fixture
def sysfs(tmp_path):
    net_dir = tmp_path / "net"
    (net_dir / NETDEV / "statistics").mkdir(parents=True)
    (net_dir / NETDEV / "mtu").write_text("9000\n")
    root = tmp_path / "sys"

    def build(addresses, extra=()):
        cx7.sync_tree(root, HCA, 1, NETDEV, "4c:bb:47:00:11:23", list(addresses), extra_addresses=list(extra),
                      table_size=16, net_dir=net_dir)
        return {"sysfs_root": str(root), "port": 1, "roce_version": 2}

    return build


def test_the_gid_of_each_carrier_link_is_read_like_roce_gid(sysfs):
    gid = sysfs(["192.168.100.11"], extra=["192.168.100.111"])
    node = FakeNode({NETDEV: [(0, ip_json(), "")]})
    found = check(node, gid=gid)["links"][0]["gid"]
    assert found["index"] == 5 and found["type"] == "RoCE v2" and found["netdev"] == NETDEV
    assert found["port"]["state"] == "ACTIVE" and found["port"]["active_mtu"] == 4096
    assert "port_rcv_errors" in found["counters"] and len(found["table"]) == 6


def test_a_missing_gid_is_waited_for_a_moment_then_named(sysfs):
    gid = sysfs(["192.168.100.212"])
    node = FakeNode({NETDEV: [(0, ip_json(), "")]})
    result = check(node, gid=gid, timeout=30, gid_wait=4)
    assert result["waited"] == 4.0
    found = result["links"][0]["gid"]
    assert found["failed"] is True and "No GID carries address 192.168.100.11" in found["msg"]
    assert "(192.168.100.212), RoCE v2, netdev enP2p1s0f1np1" in found["msg"]


def test_a_link_without_carrier_has_no_gid_lookup(sysfs):
    gid = sysfs(["192.168.100.11"])
    node = FakeNode({NETDEV: [(0, ip_json(carrier=False, addresses=()), "")]})
    assert check(node, gid=gid, wait_for_carrier=False)["links"][0]["gid"] is None


def test_a_missing_hca_is_a_gid_failure_not_a_crash(sysfs):
    gid = sysfs(["192.168.100.11"])
    node = FakeNode({NETDEV: [(0, ip_json(), "")]})
    found = check(node, links=[dict(LINK, hca="roceP9p9s0f9")], gid=gid)["links"][0]["gid"]
    assert found["failed"] is True and "HCA roceP9p9s0f9 not found" in found["msg"]


# --- the controller side ------------------------------------------------------


def plan(*addresses):
    names = [(NETDEV, HCA), (LINK2["netdev"], LINK2["hca"])]
    return {"mtu": 9000, "links": [{"netdev": names[i][0], "hca": names[i][1], "address": a, "prefix": 24}
                                   for i, a in enumerate(addresses)]}


def test_ping_plan_pairs_links_by_position():
    plans = {"a": plan("10.0.0.1", "10.0.1.1"), "b": plan("10.0.0.2", "10.0.1.2"), "c": plan("10.0.0.3")}
    assert ping_plan(plans, "a") == [
        {"peer": "b", "position": 0, "netdev": NETDEV, "address": "10.0.0.2"},
        {"peer": "b", "position": 1, "netdev": "enp1s0f1np1", "address": "10.0.1.2"},
        {"peer": "c", "position": 0, "netdev": NETDEV, "address": "10.0.0.3"},
    ]
    assert ping_plan({"a": plan("10.0.0.1")}, "a") == []


def test_ping_plan_needs_the_pinging_host():
    with pytest.raises(FabricLinkError) as raised:
        ping_plan({"b": plan("10.0.0.2")}, "a")
    assert "a included" in str(raised.value)


def state(address, carrier=True, configured=True, netdev=NETDEV, hca=HCA, mtu=9000, present=True):
    return {"ifname": netdev, "hca": hca, "address": address, "present": present, "carrier": carrier,
            "operstate": "UP" if carrier else "DOWN", "mtu": mtu,
            "addresses": [address] if configured else [], "configured": configured, "error": None}


def result(*links, pings=(), waited=0.0):
    return {"links": list(links), "pings": list(pings), "waited": waited}


def ping_result(peer, address, fixture="ping_jumbo_ok.txt", rc=0, stderr="", netdev=NETDEV):
    return {"peer": peer, "position": 0, "netdev": netdev, "address": address, "skipped": False, "rc": rc,
            "stdout": (PING_FIXTURES / fixture).read_text() if fixture else "", "stderr": stderr}


def test_a_healthy_node_has_no_problems():
    mine = result(state("192.168.100.11"), pings=[ping_result("spark2", "192.168.100.12")])
    judged = verdict(mine, "spark1", {"spark1": mine, "spark2": result(state("192.168.100.12"))}, 9000)
    assert judged["warnings"] == [] and judged["link_problems"] == [] and judged["ping_problems"] == []
    assert judged["links"] == mine["links"] and judged["gids"] == []


def test_a_link_without_carrier_is_a_warning_with_the_cold_boot_remedy():
    mine = result(state("192.168.100.11"),
                  state("192.168.101.11", carrier=False, configured=False, netdev=LINK2["netdev"], hca=LINK2["hca"]))
    judged = verdict(mine, "spark1", {}, 9000)
    assert judged["link_problems"] == []
    assert judged["warnings"] == [
        "WARNING spark1: enp1s0f1np1 has no carrier and is left out of NCCL_IB_HCA. A Spark port half that stays "
        "down after a warm reboot comes back after a full power-off (shut down, remove power for 30 s, boot); "
        "check the cable and the switch port otherwise."
    ]


def test_no_link_with_carrier_fails_with_what_was_found_and_the_cold_boot_remedy():
    mine = result(state("192.168.100.11", carrier=False, configured=False, mtu=1500))
    problems = verdict(mine, "spark2", {}, 9000)["link_problems"]
    assert problems == [
        "spark2: fabric links not ready: enP2p1s0f1np1 carrier=False operstate=DOWN mtu=1500 (want 9000) "
        "addresses=none (want 192.168.100.11); no fabric link has carrier. " + COLD_BOOT_REMEDY
        + " Otherwise see 'journalctl -u systemd-networkd' on the node."
    ]


def test_a_carrier_link_without_its_address_or_mtu_fails_after_the_wait():
    mine = result(state("192.168.100.11", configured=False, mtu=1500), waited=30.2)
    problems = verdict(mine, "spark3", {}, "9000")["link_problems"]
    assert problems == [
        "spark3: fabric links not ready after 30.2 s: enP2p1s0f1np1 carrier=True operstate=UP mtu=1500 (want 9000) "
        "addresses=none (want 192.168.100.11); see 'journalctl -u systemd-networkd' on the node."
    ]


def test_a_missing_netdev_is_a_link_problem():
    gone = dict(state("192.168.100.11", carrier=False, configured=False), present=False, mtu=None,
                error='Device "enP2p1s0f1np1" does not exist.')
    problems = verdict(result(state("192.168.101.11", netdev="x"), gone), "spark1", {}, 9000)["link_problems"]
    assert len(problems) == 1
    assert 'enP2p1s0f1np1 missing (Device "enP2p1s0f1np1" does not exist.; check roce_fabric_links / roce_fabric_netdev)' in problems[0]


def test_silent_peers_are_named_with_the_size_the_link_and_why():
    mine = result(state("192.168.100.11"), pings=[
        ping_result("spark2", "192.168.100.12"),
        ping_result("spark3", "192.168.100.13", "ping_frag_needed.txt", rc=1),
        ping_result("spark4", "192.168.100.14", "ping_no_reply.txt", rc=1),
    ])
    problems = verdict(mine, "spark1", {}, 9000)["ping_problems"]
    assert problems == [
        "spark1: spark3 (192.168.100.13) does not answer a 8972-byte don't-fragment ping over enP2p1s0f1np1 "
        "(From tl-laptop.local (192.168.2.21) icmp_seq=1 Frag needed and DF set (mtu = 1500)); "
        "spark4 (192.168.100.14) does not answer a 8972-byte don't-fragment ping over enP2p1s0f1np1 "
        "(1 packets transmitted, 0 received, 100% packet loss, time 10000ms); "
        "every node and switch port on the path needs MTU 9000 (roce_fabric_mtu)."
    ]


def test_a_ping_that_printed_nothing_is_explained_by_stderr_or_rc():
    mine = result(state("192.168.100.11"), pings=[
        ping_result("spark2", "192.168.100.12", None, rc=2, stderr="ping: unknown iface enP2p1s0f1np1"),
        ping_result("spark3", "192.168.100.13", None, rc=124),
    ])
    problem = verdict(mine, "spark1", {}, 9000)["ping_problems"][0]
    assert "(ping: unknown iface enP2p1s0f1np1)" in problem and "(rc 124)" in problem


def test_pings_to_a_peer_link_without_carrier_or_not_configured_are_left_to_that_peer():
    mine = result(state("192.168.100.11"), pings=[
        ping_result("spark2", "192.168.100.12", "ping_no_reply.txt", rc=1),
        ping_result("spark3", "192.168.100.13", "ping_no_reply.txt", rc=1),
        dict(ping_result("spark4", "192.168.100.14"), skipped=True),
    ])
    checks = {"spark2": result(state("192.168.100.12", carrier=False, configured=False)),
              "spark3": result(state("192.168.100.13", configured=False))}
    assert verdict(mine, "spark1", checks, 9000)["ping_problems"] == []


def test_gids_are_shaped_like_roce_gid_loop_results():
    with_gid = dict(state("192.168.100.11"), gid={"index": 3, "gid": "x", "type": "RoCE v2", "port": {"state": "ACTIVE"}})
    without = dict(state("192.168.101.11", carrier=False, configured=False, netdev="y"), gid=None)
    judged = verdict(result(with_gid, without), "spark1", {}, 9000)
    assert judged["gids"] == [{"index": 3, "gid": "x", "type": "RoCE v2", "port": {"state": "ACTIVE"},
                               "item": state("192.168.100.11")}]
    assert all("gid" not in link for link in judged["links"])


def test_verdict_needs_a_check_result():
    with pytest.raises(FabricLinkError) as raised:
        verdict({"msg": "unreachable"}, "spark1")
    assert "spark1: expected a fabric_link_check result" in str(raised.value)
