# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The checkout's ansible.cfg caches facts per inventory (plugins/cache/
inventory_jsonfile.py): the simulated inventory and a copy of the sample one
both have a spark1; a fact cached for one is not the other's, and a re-run
with the same inventory finds its own. ansible-playbook runs with the
checkout's ansible.cfg, the cache directory moved to a temporary one; the
probe tasks (set_fact, debug) reach no node, and the one gathering is spark1
of the sample copy, a local connection."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from unit_support import REPO_ROOT

ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
SIMULATED = REPO_ROOT / "inventory" / "simulated" / "hosts.yml"
PROBE = """\
- name: Probe the fact cache
  hosts: spark1
  gather_facts: {gather}
  gather_subset: [min]
  tasks:
    - name: Cache the probe fact
      ansible.builtin.set_fact:
        dgxspark_cache_probe: "{{{{ probe }}}}"
        cacheable: true
      when: probe is defined
    - name: Show the cached probe fact
      ansible.builtin.debug:
        msg: "probe={{{{ ansible_facts.dgxspark_cache_probe | default('none') }}}}"
"""


@pytest.fixture
def runner(tmp_path):
    """Run a probe playbook with the checkout's ansible.cfg from the checkout's
    root; the fact cache in tmp_path/facts."""
    for gather in ("false", "true"):
        (tmp_path / ("probe-gather-%s.yml" % gather)).write_text(PROBE.format(gather=gather))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCAL_TEMP=str(tmp_path / ".tmp"))
    env.pop("ANSIBLE_INVENTORY", None)

    def run(*args, gather=False):
        done = subprocess.run([ANSIBLE_PLAYBOOK, str(tmp_path / ("probe-gather-%s.yml" % str(gather).lower())), *args],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout
    return run


def probe(output):
    (value,) = re.findall(r"probe=(\w+)", output)
    return value


@pytest.fixture
def sample_copy(tmp_path):
    """inventory/sample, copied, with spark1 reached by a local connection (this
    Python as its interpreter)."""
    copy = tmp_path / "sample"
    shutil.copytree(REPO_ROOT / "inventory" / "sample", copy)
    hosts = copy / "hosts.yml"
    text = hosts.read_text()
    assert "      ansible_host: 192.0.2.11\n" in text
    local = "      ansible_connection: local\n      ansible_python_interpreter: %s\n" % sys.executable
    hosts.write_text(text.replace("      ansible_host: 192.0.2.11\n", "      ansible_host: 192.0.2.11\n" + local, 1))
    return hosts


def test_each_inventory_keeps_its_own_facts(runner, sample_copy, tmp_path):
    # The configured inventory (the simulated one) caches a fact for its spark1.
    assert probe(runner("-e", "probe=simulated")) == "simulated"
    # The sample's spark1 does not get it, and caches its own.
    assert probe(runner("-i", str(sample_copy))) == "none"
    assert probe(runner("-i", str(sample_copy), "-e", "probe=sample")) == "sample"
    # The simulated inventory, named by -i this time, finds its fact again.
    assert probe(runner("-i", str(SIMULATED))) == "simulated"
    directories = {path.name: path for path in (tmp_path / "facts").iterdir()}
    assert len(directories) == 2
    notes = sorted((path / ".inventory_sources").read_text() for path in directories.values())
    assert notes == sorted([str(SIMULATED.resolve()) + "\n", str(sample_copy.resolve()) + "\n"])
    for path in directories.values():
        assert [entry.name for entry in path.iterdir() if not entry.name.startswith(".")] != []


def test_a_rerun_with_the_same_inventory_gathers_no_facts(runner, sample_copy):
    first = runner("-i", str(sample_copy), gather=True)
    assert "TASK [Gathering Facts]" in first
    again = runner("-i", str(sample_copy), gather=True)
    assert "TASK [Gathering Facts]" not in again
