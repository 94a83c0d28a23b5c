# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import _exporter_access as access


class FakeFirewall:
    """iptables and ip6tables as lists of chains, answering like the real tools."""

    def __init__(self, families=("iptables", "ip6tables"), failing=None):
        self.families = families
        self.chains = {tool: {"INPUT": [["-p", "tcp", "--dport", "22", "-j", "ACCEPT"]]} for tool in families}
        self.failing = failing
        self.calls = []

    def which(self, tool):
        return tool in self.families

    def run(self, tool, arguments, check=True):
        self.calls.append([tool] + arguments)
        chains = self.chains[tool]
        action, chain, rule = arguments[0], arguments[1], arguments[2:]
        ok = True
        if (tool, action) == self.failing:
            ok = False
        elif action == "-N":
            ok = chain not in chains
            chains.setdefault(chain, [])
        elif action == "-F":
            ok = chain in chains
            chains.get(chain, []).clear()
        elif action == "-X":
            ok = chain in chains and not chains[chain]
            if ok:
                del chains[chain]
        elif action == "-A":
            chains[chain].append(rule)
        elif action == "-I":
            chains[chain].insert(int(rule[0]) - 1, rule[1:])
        elif action == "-C":
            ok = rule in chains[chain]
        elif action == "-D":
            ok = rule in chains[chain]
            if ok:
                chains[chain].remove(rule)
        if check and not ok:
            raise RuntimeError("%s %s failed" % (tool, " ".join(arguments)))
        return ok


def test_readers_are_split_by_family_and_names_resolved():
    names = {"prom.example": ["10.20.0.5", "fd00::5"], "gone.example": []}
    networks, unresolved = access.reader_networks(["10.10.0.11", " 10.10.1.0/24", "", "prom.example", "gone.example",
                                                   "10.10.0.11"], resolve=names.__getitem__)
    assert networks == {4: ["10.10.0.11/32", "10.10.1.0/24", "10.20.0.5/32"], 6: ["fd00::5/128"]}
    assert unresolved == ["gone.example"]


def test_the_chain_returns_the_readers_and_resets_everyone_else():
    assert access.chain_rules(["10.10.1.0/24", "10.10.0.11/32"]) == [
        ["-i", "lo", "-j", "RETURN"],
        ["-s", "10.10.1.0/24", "-j", "RETURN"],
        ["-s", "10.10.0.11/32", "-j", "RETURN"],
        ["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"],
    ]


def test_apply_puts_one_jump_first_in_input_and_a_second_apply_rebuilds_the_chain_without_a_second_jump():
    firewall = FakeFirewall()
    lines = access.apply(9100, ["10.10.0.11"], run=firewall.run, which=firewall.which)
    jump = ["-p", "tcp", "--dport", "9100", "-j", access.CHAIN]
    for tool in ("iptables", "ip6tables"):
        assert firewall.chains[tool]["INPUT"][0] == jump
    assert firewall.chains["iptables"][access.CHAIN] == access.chain_rules(["10.10.0.11/32"])
    assert firewall.chains["ip6tables"][access.CHAIN] == access.chain_rules([])
    assert lines == ["IPv4: TCP port 9100 answers the node itself and 10.10.0.11/32 only",
                     "IPv6: TCP port 9100 answers the node itself only"]
    access.apply(9100, ["10.10.0.12"], run=firewall.run, which=firewall.which)
    assert firewall.chains["iptables"]["INPUT"].count(jump) == 1
    assert firewall.chains["iptables"][access.CHAIN] == access.chain_rules(["10.10.0.12/32"])
    # The node's own rules stay where they were.
    assert firewall.chains["iptables"]["INPUT"][1:] == [["-p", "tcp", "--dport", "22", "-j", "ACCEPT"]]


def test_remove_takes_every_jump_and_the_chain_out():
    firewall = FakeFirewall()
    access.apply(9100, [], run=firewall.run, which=firewall.which)
    firewall.chains["iptables"]["INPUT"].append(["-p", "tcp", "--dport", "9100", "-j", access.CHAIN])
    access.remove(9100, run=firewall.run, which=firewall.which)
    for tool in ("iptables", "ip6tables"):
        assert firewall.chains[tool] == {"INPUT": [["-p", "tcp", "--dport", "22", "-j", "ACCEPT"]]}


def test_a_node_without_ip6tables_keeps_the_ipv4_rules_and_says_so():
    firewall = FakeFirewall(families=("iptables",))
    lines = access.apply(9100, [], run=firewall.run, which=firewall.which)
    assert "ip6tables is not installed" in lines[-1]
    assert access.CHAIN in firewall.chains["iptables"]


def test_a_rule_the_tool_refuses_fails_the_apply_naming_the_command():
    firewall = FakeFirewall(failing=("iptables", "-A"))
    with pytest.raises(RuntimeError, match="iptables -A DGXSPARK-EXPORTER -i lo -j RETURN failed"):
        access.apply(9100, [], run=firewall.run, which=firewall.which)


def test_main_reports_a_failure_on_stderr_and_exits_1(monkeypatch, capsys):
    def refuse(port, readers):
        raise RuntimeError("iptables -N x failed (exit 4): Permission denied")
    monkeypatch.setattr(access, "apply", refuse)
    assert access.main(["apply", "--port", "9100", "--reader", "10.0.0.1"]) == 1
    assert "Permission denied" in capsys.readouterr().err
