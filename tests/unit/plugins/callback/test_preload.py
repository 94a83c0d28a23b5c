# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The preload callback loads the collection's filters in the process it runs in, so the
workers Ansible forks from it inherit them; ansible.cfg enables it."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]

# In a fresh interpreter, so that no other test has loaded the filters already.
PROBE = r"""
import sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
loaded = lambda: sorted(m for m in sys.modules if m.startswith(("ansible_collections.dgxspark.cluster.plugins.filter.",
                                                                "ansible_collections.dgxspark.cluster.plugins.action.",
                                                                "ansible_collections.dgxspark.cluster.plugins.lookup.")))
before = loaded()
from ansible_collections.dgxspark.cluster.plugins.callback.preload import CallbackModule
CallbackModule().v2_playbook_on_start(None)
print(len(before), " ".join(loaded()))
"""


def test_the_callback_loads_every_filter_file_the_read_action_and_the_template_lookup_of_the_collection():
    done = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "collections")], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    before, loaded = done.stdout.split(" ", 1)
    assert before == "0"
    expected = sorted(["ansible_collections.dgxspark.cluster.plugins.action.node_read",
                       "ansible_collections.dgxspark.cluster.plugins.lookup.role_template"]
                      + ["ansible_collections.dgxspark.cluster.plugins.filter." + path.stem
                         for path in (ROOT / "plugins" / "filter").glob("*.py")])
    assert loaded.split() == expected


def test_ansible_cfg_enables_it():
    config = configparser.ConfigParser()
    config.read(ROOT / "ansible.cfg")
    enabled = [name.strip() for name in config["defaults"]["callbacks_enabled"].split(",")]
    assert "dgxspark.cluster.preload" in enabled
    assert config["defaults"]["inject_facts_as_vars"] == "false"
