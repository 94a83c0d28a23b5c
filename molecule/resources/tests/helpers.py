# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side helpers for the Molecule verify tests: run the real
playbooks against the simulated nodes and read the inventory they use."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventory" / "simulated" / "hosts.yml"
GROUP = "dgxspark_cluster"


def inventory_hosts():
    data = yaml.safe_load(INVENTORY.read_text())
    return data[GROUP]["hosts"]


def group_vars():
    merged = {}
    for path in sorted((ROOT / "inventory" / "simulated" / "group_vars" / GROUP).glob("*.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


def run_playbook(playbook, *args, extra_vars=None, check=False, timeout=900):
    """Run a playbook of the collection on the simulated cluster; return the CompletedProcess."""
    cmd = ["ansible-playbook", "-i", str(INVENTORY), str(ROOT / "playbooks" / playbook)]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if check:
        cmd.append("--check")
    cmd += list(args)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def node_state(host, command):
    """Output of a read-only command on a node, for before/after comparisons."""
    return subprocess.run(
        ["docker", "exec", host, "sh", "-c", command], capture_output=True, text=True, check=True
    ).stdout


def node_file_digests(hosts, paths):
    """sha256 of each path on each node ('missing' when absent): the 'nothing
    changed' evidence of a refused run."""
    digests = {}
    for host in hosts:
        for path in paths:
            result = subprocess.run(
                ["docker", "exec", host, "sh", "-c", f"sha256sum {path} 2>/dev/null || echo missing"],
                capture_output=True, text=True, check=True,
            )
            digests[(host, path)] = result.stdout.split()[0]
    return digests


def host_side_veth(host, netdev):
    """Name of the host end of a node's veth: the switch port of the simulation."""
    peer_index = node_state(host, f"cat /sys/class/net/{netdev}/iflink").strip()
    for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout.splitlines():
        index, name = line.split(":")[:2]
        if index.strip() == peer_index:
            return name.strip().split("@")[0]
    raise LookupError(f"no host interface with index {peer_index} for {host}:{netdev}")


def flat(output):
    """Playbook output with line wrapping undone, for matching messages."""
    return " ".join(output.split())
