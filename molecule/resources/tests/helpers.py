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
